#!/usr/bin/env bash
# Checks that the repository describes the product, not the work on it, and that its documents'
# links hold:
#  1. no history narration in any tracked text file: issue numbers ("issue 12", "issue #12"),
#     work sessions ("the twenty-sixth session"), counted-run wording ("the previous run");
#     CHANGELOG.md, where what changed and when belongs, is exempt;
#  2. every relative link in README.md, CHANGELOG.md and docs/**/*.md names a file or folder that
#     exists, and a #fragment names a heading of the target Markdown file (GitHub's anchors).
# Prints file:line for each finding and exits 1 if there is any.
# Usage: scripts/check_docs.sh
set -euo pipefail
cd "$(dirname "$0")/.."

status=0

# 1. History narration. This script names the patterns, so it is left out.
ordinals='(eleven|twelf|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twentie|thirtie)th|twenty-(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth)'
pattern="\\bissues? *#?[0-9]+|\\bissue #|\\bsessions?\\b|\\b(${ordinals})\\b|\\b[0-9]+(st|nd|rd|th) (run|campaign)\\b|\\bprevious (run|campaign)|\\bwe (tried|measured)\\b"
if hits=$(git grep -nIiE "$pattern" -- . ':!CHANGELOG.md' ':!scripts/check_docs.sh'); then
  echo "check_docs: history narration (the repository describes the product; history goes in CHANGELOG.md):"
  printf '%s\n' "$hits"
  status=1
fi

# 2. Relative links and their anchors.
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
files=$(ls README.md CHANGELOG.md 2>/dev/null; find docs -name '*.md' | sort)
# shellcheck disable=SC2086
if ! "$py" - $files <<'EOF'; then
import os
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def lines_outside_code(path):
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                yield number, line


def anchors(path, cache={}):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-', repeats -1, -2."""
    if path not in cache:
        seen, found = {}, set()
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if not m:
                continue
            text = re.sub(r"`|\*\*|__", "", m.group(2)).strip().lower()
            slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else "%s-%d" % (slug, n))
        cache[path] = found
    return cache[path]


bad = 0
for source in sys.argv[1:]:
    for number, line in lines_outside_code(source):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto: ...
            path, _, fragment = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(source), path)) if path else source
            if not os.path.exists(resolved):
                print("%s:%d: link to a missing file: %s" % (source, number, target))
                bad += 1
            elif fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
                print("%s:%d: no heading for the anchor: %s" % (source, number, target))
                bad += 1
sys.exit(1 if bad else 0)
EOF
  echo "check_docs: broken relative links (above)"
  status=1
fi

[ "$status" -eq 0 ] && echo "check_docs: ok"
exit "$status"
