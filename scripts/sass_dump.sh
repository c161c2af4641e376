# shellcheck shell=bash
# Sourced by scripts/sass_same.sh and scripts/sass_parts.sh: a kernel
# source's SASS without a GPU, through scripts/sass.sh's tools (NVRTC,
# cuobjdump and nvdisasm from PyPI).
#   sass_tools                        builds the tools once, sets cu13
#   dump_sass ROOT FILE ARCH DIR OPTS compiles kernels/FILE as it is in the
#       checkout ROOT for ARCH with NVRTC options OPTS (TestDumpCubin), and
#       writes DIR/FILE.sass (the compile's log in DIR/FILE.log); fails where
#       it does not compile
sass_tools() {
  bash scripts/sass.sh "${1:-pool.cu}" > /dev/null
  cu13=$(build/sass-tools/bin/python -c 'import os, nvidia; print(os.path.join(nvidia.__path__[0], "cu13"))')
}
dump_sass() {
  local root=$1 f=$2 arch=$3 dir=$4 opts=$5
  mkdir -p "$dir"
  (cd "$root" && MAMBAGO_NVRTC="$cu13/lib/libnvrtc.so.13" MAMBAGO_DUMP="$f" MAMBAGO_DUMP_ARCH="$arch" \
    MAMBAGO_DUMP_OPTS="$opts" MAMBAGO_DUMP_DIR="$dir" go test -count=1 -run '^TestDumpCubin$' ./kernels) \
    > "$dir/$f.log" 2>&1 || return 1
  PATH="$cu13/bin:$PATH" cuobjdump -sass "$dir/$f.cubin" > "$dir/$f.sass"
}
