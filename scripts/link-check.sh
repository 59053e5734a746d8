#!/usr/bin/env bash
# Every relative link of README.md and docs/*.md points at an existing file, and every #anchor at a heading of it.
cd "$(dirname "$0")/.."
bad=0
for f in README.md docs/*.md; do
  dir=$(dirname "$f")
  while IFS= read -r link; do
    target=${link%%#*}; anchor=""; [[ "$link" == *"#"* ]] && anchor=${link#*#}
    case "$target" in http*|mailto:*) continue ;; esac
    if [ -z "$target" ]; then path="$f"; else path="$dir/$target"; fi
    if [ ! -e "$path" ]; then echo "$f: broken link $link"; bad=1; continue; fi
    if [ -n "$anchor" ]; then
      # GitHub anchors: lower case, drop punctuation except - and _, spaces -> -
      if ! grep '^#' "$path" | sed 's/^#* *//' | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9 _-]//g; s/ /-/g' | grep -qx -- "$anchor"; then
        echo "$f: no heading for #$anchor in $path"; bad=1
      fi
    fi
  done < <(grep -o '\]([^)]*)' "$f" | sed 's/^](//; s/)$//')
done
[ $bad = 0 ] && echo "links: all relative links of README.md and docs/*.md resolve"
exit $bad
