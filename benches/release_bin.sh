# Sourced by the bench scripts, from the repository's root: sets `bin` to the switchboard binary
# to measure. That is $BIN when it is set (to compare two builds, run a script once with each);
# otherwise the release build, built here (honours CARGO_TARGET_DIR, relative or absolute).
if [[ -z ${BIN:-} ]]; then
    cargo build --release --quiet --bin switchboard
    target=${CARGO_TARGET_DIR:-target}
    [[ $target == /* ]] || target="$(pwd)/$target"
    BIN="$target/release/switchboard"
fi
[[ -x $BIN ]] || { echo "error: $BIN is not an executable" >&2; exit 2; }
bin=$BIN
