#!/usr/bin/env bash
# unxz.sh SRC.xz DST: decompresses SRC to DST, made executable (the carried binaries), with
# python3's lzma where the machine has no xz (the GPU machines have no package manager).
set -u -o pipefail
[ $# -eq 2 ] || { echo "usage: $0 SRC.xz DST" >&2; exit 2; }
if command -v xz > /dev/null; then
  xz -dc "$1" > "$2"
else
  python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$1" "$2"
fi || { echo "unxz: cannot decompress $1" >&2; exit 1; }
chmod +x "$2"
