/*
Copyright 2026 The Cachet Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// stringConsts are the string constants named prefix... in the non-test Go
// files of dir, except those documented as "Event reasons only".
func stringConsts(t *testing.T, dir, prefix string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		eventOnly := false
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if spec.Doc != nil && strings.Contains(spec.Doc.Text(), "Event reasons only") {
				eventOnly = true
			}
			for i, name := range spec.Names {
				lit, isLit := valueAt(spec, i).(*ast.BasicLit)
				if !isLit || lit.Kind != token.STRING || !strings.HasPrefix(name.Name, prefix) || eventOnly {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				consts[name.Name] = v
			}
			return true
		})
	}
	if len(consts) == 0 {
		t.Fatalf("no %s constants in %s", prefix, dir)
	}
	return consts
}

func valueAt(spec *ast.ValueSpec, i int) ast.Expr {
	if i < len(spec.Values) {
		return spec.Values[i]
	}
	return nil
}

// kubectl explain and docs/api-reference.md show the conditions field's
// description: every condition type and every reason the operator sets must
// be there, or a user cannot look up what a status means.
func TestEveryConditionAndReasonIsInTheCRD(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", "cache.cachet.dev_caches.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Status struct {
								Properties struct {
									Conditions struct {
										Description string `json:"description"`
									} `json:"conditions"`
								} `json:"properties"`
							} `json:"status"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil || len(crd.Spec.Versions) != 1 {
		t.Fatalf("reading the CRD: %v (%d versions)", err, len(crd.Spec.Versions))
	}
	doc := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Status.Properties.Conditions.Description
	for name, v := range stringConsts(t, filepath.Join("..", "api", "v1alpha1"), "Condition") {
		if !strings.Contains(doc, v+":") && !strings.Contains(doc, v+" (") {
			t.Errorf("condition %s (%s) is not described in status.conditions", v, name)
		}
	}
	for name, v := range stringConsts(t, ".", "Reason") {
		if !strings.Contains(doc, v) {
			t.Errorf("reason %s (%s) is not described in status.conditions", v, name)
		}
	}
}
