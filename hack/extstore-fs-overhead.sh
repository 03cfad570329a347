#!/bin/sh
# How much of a claim the engine's non-root user can allocate on a freshly
# made filesystem of exactly the claim's size, against the operator's rule
# for the extstore file (internal/engine ExtstoreFileBytes: 90% less 64Mi).
# Sparse files, no mount, no root needed: ext4's free blocks less its root
# reserve, from dumpe2fs -h. The table in docs/operator.md comes from this.
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
img=$dir/img
printf '%-6s %-6s %14s %8s %14s %12s\n' claim block "usable MiB" share "file MiB" "margin MiB"
for size in ${SIZES:-80M 256M 512M 1G 2G 8G 64G 1T}; do
	rm -f "$img"
	truncate -s "$size" "$img"
	mkfs.ext4 -q -F "$img" >/dev/null 2>&1
	dumpe2fs -h "$img" 2>/dev/null | awk -v claim="$size" -F: '
		/^Block count/ {blocks = $2 + 0}
		/^Free blocks/ {free = $2 + 0}
		/^Reserved block count/ {reserved = $2 + 0}
		/^Block size/ {bs = $2 + 0}
		END {
			total = blocks * bs / 1048576; usable = (free - reserved) * bs / 1048576
			file = int(total * 0.90 - 64)
			printf "%-6s %-6d %14.2f %7.1f%% %14d %12.2f\n", claim, bs, usable, 100 * usable / total, file, usable - file
		}'
done
if command -v mkfs.xfs >/dev/null; then
	echo "xfs (mkfs.xfs is here): sizes as above, usable from xfs_db's sb fdblocks"
	for size in ${SIZES:-512M 1G 2G 8G 64G}; do
		rm -f "$img"; truncate -s "$size" "$img"
		mkfs.xfs -q -f "$img" >/dev/null 2>&1
		xfs_db -r -c 'sb 0' -c 'print blocksize fdblocks dblocks' "$img"
	done
else
	echo "no mkfs.xfs here: xfs not measured"
fi
