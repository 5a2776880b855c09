#!/usr/bin/env bash
# Run one of these device scripts with its outputs packed into one file: the device tool brings back at
# most eight files from $OUT (a call on two H200s lost two runs' CSVs that way), so the script writes into
# a work folder and this packs it as $OUT/out.tgz, whatever the script's exit (a timeout's partial
# outputs too). Usage: bash scripts/device/packed.sh SCRIPT [ARGS...]   (e.g. pairs-speed.sh)
set -uo pipefail
dest=${OUT:?the device tool sets OUT}
work=$(mktemp -d /tmp/gpuipc-device-XXXXXX)
trap 'tar czf "$dest/out.tgz" -C "$work" . && rm -rf "$work"' EXIT
OUT=$work bash "scripts/device/$1" "${@:2}"
