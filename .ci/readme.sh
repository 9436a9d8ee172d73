#!/usr/bin/env bash
# What README.md promises about itself, checked (issue 34):
#
# - it stays within 222 lines, whatever a section grows into (detail
#   belongs in docs/GUIDE.md; issue 55: read in ten minutes);
# - every link works where the README is read without the repository
#   (crates.io, docs.rs): no relative link, and a link into the package
#   (docs.rs's source view) names a file `cargo package --list` lists;
# - no version of this crate that a newcomer never saw is named in the
#   README, the guide or the rustdoc (the CHANGELOG's business);
# - the road table says where each road's piece goes and what it cannot
#   see, reuse included;
# - the order of layers "Where it goes" names is stacks/examples/stack.rs's
#   (that example is built and run by .ci/examples.sh) and the recipe's it
#   links to (src/recipes.md, run as doctests of `stacks`);
# - every Rust block compiles as shown or is an excerpt whose section links
#   to a compiled page on docs.rs;
# - "Working on it" says what `cargo test` builds and how long it takes;
# - its `cargo doc` command shows every road, as docs.rs does (every feature
#   of Cargo.toml's [package.metadata.docs.rs], or --all-features), and the
#   dependency lines it, the guide and the recipes give for the other roads
#   (reqwest-middleware, tonic) and for this crate name the versions the
#   repository builds and tests (issue 49).
#
# `bash .ci/readme.sh publish [cargo args]` runs the README's publish
# command with `--dry-run` and the arguments given (it must publish from the
# root, as typed).
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "readme: $*" >&2; exit 1; }

# The lines of the first ```$2 block under the "## $1" heading.
block() {
    awk -v heading="## $1" -v fence='```'"$2" '
        /^## / { section = ($0 == heading); next }
        section && !found && !inside && index($0, fence) == 1 { inside = 1; next }
        inside && /^```/ { inside = 0; found = 1; next }
        inside { print }
    ' README.md
}

if [ "${1:-}" = publish ]; then
    shift
    command=$(block "Working on it" sh | sed -n 's/^\(cargo publish[^#]*\)#.*/\1/p' | sed 's/ *$//')
    [ -n "$command" ] || fail "no \`cargo publish\` line in the sh block of 'Working on it'"
    grep -Eqx 'cargo publish( -p [a-z0-9-]+)?' <<<"$command" || fail "unexpected publish command: $command"
    echo "readme: $command --dry-run $*"
    # Word splitting on purpose: the command as a reader types it.
    # shellcheck disable=SC2086
    $command --dry-run "$@"
    exit 0
fi

lines=$(wc -l <README.md)
[ "$lines" -le 222 ] || fail "README.md has $lines lines; at most 222 (move detail to docs/GUIDE.md)"
echo "readme: $lines lines (at most 222)"

# Links: inline `](target)` and reference definitions `[name]: target`,
# outside code blocks.
links=$(awk '/^```/ { code = !code; next } !code' README.md |
    grep -oE '\]\([^)]*\)|^\[[^]]+\]: *[^ ]+' | sed -E 's/^\]\(//; s/\)$//; s/^\[[^]]+\]: *//')
packaged=$(cargo package --locked -p drain-on-drop --list --allow-dirty 2>/dev/null) ||
    fail "cargo package --list failed (run it to see why)"
source_view=https://docs.rs/crate/drain-on-drop/latest/source/
while read -r link; do
    [ -n "$link" ] || continue
    case "$link" in
        "$source_view"*)
            file=${link#"$source_view"}
            grep -qx "$file" <<<"$packaged" || fail "link to $file, which the package does not hold"
            ;;
        https://* | http://* | '#'*) ;;
        *) fail "relative link '$link': it breaks on crates.io and docs.rs (link into the package through $source_view)" ;;
    esac
done <<<"$links"
echo "readme: $(wc -l <<<"$links") links, none relative, every one into the package packaged"

# Versions of this crate before the current one, from the CHANGELOG's
# headings: named in reader-facing text only by the CHANGELOG.
current=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
for v in $(sed -n 's/^## \[\([0-9][0-9.]*\)\].*/\1/p' CHANGELOG.md); do
    [ "$v" != "$current" ] || continue
    minor=${v%.*}
    pattern="(^|[^0-9.])(${v//./\\.}|${minor//./\\.}'s)([^0-9]|$)"
    hits=$(
        grep -nE "$pattern" README.md docs/GUIDE.md src/recipes.md || true
        grep -nE "^ *//[/!].*$pattern" src/*.rs src/*/*.rs || true
    )
    [ -z "$hits" ] || fail "version $v named outside the CHANGELOG:
$hits"
done
echo "readme: no earlier version of the crate named in the README, the guide or the rustdoc"

# The road table.
roads=$(awk '/^## / { on = ($0 == "## Where it goes"); next } on' README.md)
grep -q '^| you use | the road | its piece goes | it cannot see |$' <<<"$roads" ||
    fail "the road table lacks its 'its piece goes' and 'it cannot see' columns"
grep -q '^| reqwest with reqwest-middleware .*last .*reuse' <<<"$roads" ||
    fail "the reqwest-middleware road should say that it goes last and cannot see reuse"
echo "readme: the road table says where each piece goes and what it cannot see"

# The stack: the layers "Where it goes" names in backquotes, before the
# table, each found in order in the example and in the recipe it links to
# (the recipe's hidden lines, `# `, shown): `TraceLayer`, `timeout` ...
where=$(awk '/^## / { on = ($0 == "## Where it goes"); next } on && /^\|/ { exit } on' README.md | tr '\n' ' ')
named=$(grep -oE '`(TraceLayer|OnEarlyDropLayer|timeout|FollowRedirectLayer|retry|DecompressionLayer|DrainOnDropLayer|ResponseBodyDeadlineLayer)`' <<<"$where" | tr -d '`')
[ "$(wc -l <<<"$named")" -ge 5 ] || fail "'Where it goes' names no stack order (\`TraceLayer\`, \`timeout\` ... \`DrainOnDropLayer\`)"
# The example's and the recipe's builder lines, as `.layer(X::` / `.timeout(` / `.retry(`;
# the drain is `.layer(drain)` there.
in_order() { # $1: the text of a builder chain; prints the first name not found in order
    awk -v names="$named" '
        BEGIN { n = split(names, want, "\n") }
        {
            line = $0
            if (i < n) {
                w = want[i + 1]
                if ((w == "timeout" || w == "retry") && index(line, "." w "(")) i++
                else if (w == "DrainOnDropLayer" && (index(line, ".layer(drain)") || index(line, ".layer(DrainOnDropLayer"))) i++
                else if (index(line, ".layer(" w "::")) i++
            }
        }
        END { if (i < n) { print want[i + 1]; exit 1 } }'
}
missing=$(in_order <stacks/examples/stack.rs) ||
    fail "the README's stack order is not stacks/examples/stack.rs's: $missing not found there, in order"
recipe=$(awk '/^```/ { code = !code } !code && /^# / { on = ($0 == "# A tower-http stack"); next } on' src/recipes.md |
    sed 's/^# //; s/^#$//')
missing=$(in_order <<<"$recipe") ||
    fail "the README's stack order is not the recipe's (src/recipes.md, 'A tower-http stack'): $missing"
echo "readme: the stack order is stacks/examples/stack.rs's and the recipes'"

# Every Rust block of the README compiles as shown (the quick start's, built
# and run by .ci/quickstart.sh; `no_run` ones are doctests too), or is an
# excerpt (`rust,ignore`) whose section links to a compiled, published page
# (docs.rs).
section_of_ignored=$(awk '/^## / { h = $0 } /^```rust,ignore/ { print h }' README.md | sort -u)
while read -r heading; do
    # The quick start's excerpt (its https:// connector line) is built and
    # run by .ci/quickstart.sh, in the program it changes.
    [ -n "$heading" ] && [ "$heading" != "## Quick start" ] || continue
    awk -v h="$heading" '/^## / { on = ($0 == h); next } on' README.md | grep -q 'https://docs.rs/drain-on-drop/' ||
        fail "an excerpt (\`\`\`rust,ignore) under '$heading' links to no compiled page on docs.rs"
done <<<"$section_of_ignored"
echo "readme: every excerpt's section links to its compiled page"

# One figure for what `cargo test` costs, in 'Working on it'.
mins=$(grep -c 'cargo test .*# .*[0-9] min' README.md || true)
[ "$mins" -le 2 ] || fail "README states what \`cargo test\` takes in $mins places; one figure, in 'Working on it'"
grep -q 'cargo test  *#.*[0-9] min' <(sed -n '1,20p' README.md) &&
    fail "the README's first lines state a \`cargo test\` time: 'Working on it' has the one figure"

# What `cargo test` costs.
working=$(block "Working on it" sh)
grep -Eq '^cargo test +# .*[0-9]+ crates.*[0-9]+ min' <<<"$working" ||
    fail "'Working on it' should say how many crates \`cargo test\` builds and how long it takes"
echo "readme: says what cargo test builds"

# `cargo doc` as the README types it shows every road: with every feature
# docs.rs builds (without `http2` the HTTP/2 pages are missing).
doc_command=$(grep -o 'cargo doc [^#`]*' README.md | head -1 | sed 's/ *$//')
[ -n "$doc_command" ] || fail "no \`cargo doc\` command in the README"
docs_rs=$(awk '/^\[package.metadata.docs.rs\]/ { on = 1; next } /^\[/ { on = 0 } on && /^features/' Cargo.toml |
    grep -o '"[^"]*"' | tr -d '"')
[ -n "$docs_rs" ] || fail "no features in Cargo.toml's [package.metadata.docs.rs]"
if ! grep -q -- '--all-features' <<<"$doc_command"; then
    for feature in $docs_rs; do
        grep -q -- "$feature" <<<"$doc_command" || fail "the README's '$doc_command' lacks feature $feature, which docs.rs builds"
    done
fi
echo "readme: '$doc_command' documents every road docs.rs shows ($(echo $docs_rs))"

# Dependency lines: this crate's at its version (major.minor), reqwest's and
# reqwest-middleware's at those the crate's features build against, tonic's
# at the one the repository tests. Written as a reader copies them.
current_minor=$(sed -n 's/^version = "\([0-9]*\.[0-9]*\)\..*"$/\1/p' Cargo.toml | head -1)
requirement() { # $1 manifest, $2 crate: its version requirement, major.minor
    sed -n "s/^$2 = .*version = \"\([0-9]*\.[0-9]*\).*/\1/p; s/^$2 = \"\([0-9]*\.[0-9]*\).*/\1/p" "$1" | head -1
}
docs=(README.md docs/GUIDE.md src/recipes.md)
bad=$(grep -n 'drain-on-drop = \({ version = \)\{0,1\}"' "${docs[@]}" src/lib.rs |
    grep -v "drain-on-drop = \({ version = \)\{0,1\}\"$current_minor\"" || true)
[ -z "$bad" ] || fail "a drain-on-drop dependency line not at $current_minor:
$bad"
for pair in "Cargo.toml reqwest-middleware" "Cargo.toml reqwest" "stacks/Cargo.toml tonic"; do
    read -r manifest crate <<<"$pair"
    want=$(requirement "$manifest" "$crate")
    [ -n "$want" ] || fail "no $crate in $manifest"
    grep -q "\`$crate = \"$want\"\`" README.md || fail "the README's road table lacks \`$crate = \"$want\"\` ($manifest)"
    bad=$(grep -n "^ *$crate = \"" "${docs[@]}" | grep -v "^[^:]*:[0-9]*: *$crate = \"$want\"$" || true)
    [ -z "$bad" ] || fail "a $crate dependency line not at $want ($manifest):
$bad"
done
echo "readme: dependency lines at drain-on-drop $current_minor and the versions the repository builds (reqwest-middleware, reqwest, tonic)"
