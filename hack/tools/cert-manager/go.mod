// Module cert-manager pins the cert-manager release whose CRDs
// (deploy/crds/) hack/security-stack.sh copies out for envtest and the local
// cluster. Its controller, webhook and cainjector commands live in separate
// modules (cmd/*, module paths github.com/cert-manager/cert-manager/*-binary)
// that the module proxy here does not serve (404 on @v/list), so this module
// cannot build them: see docs/security.md.
module cachet.dev/cachet/hack/tools/cert-manager

go 1.26.0

require github.com/cert-manager/cert-manager v1.21.2
