#!/usr/bin/env bash
# ci/wheel_test.sh: the self-contained wheel's test (issue 28), which .ci/run runs after the
# packaging checks.
#
#   ci/wheel_test.sh          (work directory build/wheel-test, wiped first)
#
# 1. Builds the repaired wheel with ci/build_wheel.sh (incremental: the CMake build directory
#    is kept; TOKENFEED_WHEEL_VENV, TOKENFEED_WHEEL_BUILD and PYTHON pass through to it).
# 2. `auditwheel show --json`: the repaired wheel has a manylinux tag and no external
#    library beyond the policy's; the wheel as built (build/wheel-unrepaired/) names the
#    system libraries it needs, and each has its copy in the wheel's tokenfeed.libs/. The
#    repaired wheel holds everything the unrepaired one does (module, stubs, py.typed, the
#    command, the console script and the [hf] extra in its metadata) plus those copies.
# 3. Installs the wheel into a fresh venv (numpy, its one dependency, from PyPI or pip's cache).
# 4. The ldd check: every library the installed module and executable load is in the
#    manylinux policy or resolves inside the installed wheel; the unrepaired wheel's ELF
#    files must fail the same check.
# 5. In a private mount namespace (`unshare -m`, root), bind-mounts /dev/null over every
#    system library the wheel bundles, so that loading one from the system fails, and there:
#    - the controls (the hiding bites): hiding each library alone stops the unrepaired
#      wheel's executable, which names that library; hiding them all stops its module; both
#      run outside the namespace;
#    - the smoke suite ci/wheel_smoke.py with the venv's Python: the sample dataset's batches
#      equal `tokenfeed dump`'s, `tokenfeed prepare` of the sample conversations writes the
#      shipped dataset again, `tokenfeed inspect` (--deep) reads it.
#    A library the venv's interpreter itself links (none with Debian's python3) cannot be
#    hidden from it; it is named and left visible, and the ldd check covers it.
#    Where `unshare -m` is not permitted, the script says so, runs the smoke suite without
#    hiding, and relies on the ldd check alone.
# Ends with the wheel's tag, size, largest members and the time taken; the exit status is
# non-zero on any failure.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$repo/build/wheel-test
PYTHON=${PYTHON:-/usr/bin/python3}
tools_venv=${TOKENFEED_WHEEL_VENV:-$repo/build/wheel-venv}
start=$SECONDS
log() { echo "[wheel_test $((SECONDS - start))s] $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

rm -rf "$work"
mkdir -p "$work"

log "building the repaired wheel (ci/build_wheel.sh)"
PYTHON=$PYTHON "$repo/ci/build_wheel.sh" "$work/dist" >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; fail "ci/build_wheel.sh"; }
wheel=$(tail -n 1 "$work/build.log")
raw=$(ls "$repo"/build/wheel-unrepaired/tokenfeed-*.whl)
log "built in $((SECONDS - start)) s: $wheel"

log "auditwheel show, and the wheel's contents"
"$tools_venv/bin/auditwheel" show --json "$wheel" >"$work/show-repaired.json"
"$tools_venv/bin/auditwheel" show --json "$raw" >"$work/show-unrepaired.json"
# Writes the system libraries to hide (real paths, one a line) to hide.txt and the policy's
# library names to policy.txt.
"$tools_venv/bin/python" - "$work" "$wheel" "$raw" <<'PY'
import json, os, re, sys, zipfile
from pathlib import Path
import auditwheel.policy

work, wheel, raw = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
def fail(what):
    sys.exit(f"wheel_test: FAILED: {what}")

repaired = json.loads((work / "show-repaired.json").read_text())
unrepaired = json.loads((work / "show-unrepaired.json").read_text())
tag = repaired.get("overall_tag", "")
if not tag.startswith("manylinux_"):
    fail(f"auditwheel show: the repaired wheel's tag is {tag!r}, not manylinux: {repaired}")
if repaired["external_libs"]:
    fail(f"auditwheel show: the repaired wheel still needs external libraries {repaired['external_libs']}")
if not Path(wheel).name.endswith(f"{tag}.whl") and tag not in Path(wheel).name:
    fail(f"the wheel's name {Path(wheel).name} does not carry auditwheel's tag {tag}")
needed = unrepaired["external_libs"]
missing = sorted(k for k, v in needed.items() if v is None)
if not needed or missing:
    fail(f"the unrepaired wheel's external libraries are {needed} (unresolved: {missing})")
print(f"tag {tag} (glibc {'.'.join(tag.split('_')[1:3])}); the unrepaired wheel needs: {', '.join(sorted(needed))}")

names = zipfile.ZipFile(wheel).namelist()
raw_names = zipfile.ZipFile(raw).namelist()
bundled = sorted(n for n in names if n.startswith("tokenfeed.libs/") and not n.endswith("/"))
# auditwheel names a copy after the library's file with an 8-hex-digit hash before ".so".
unhashed = {re.sub(r"-[0-9a-f]{8}(?=\.so)", "", Path(n).name): n for n in bundled}
hide = sorted({os.path.realpath(p) for p in needed.values()})
for real in hide:
    if Path(real).name not in unhashed:
        fail(f"{real} has no copy in the wheel's tokenfeed.libs/ ({bundled})")
if len(bundled) != len(hide):
    fail(f"the wheel bundles {bundled}, the build needs {hide}")
print("bundled: " + ", ".join(f"{Path(r).name} as {unhashed[Path(r).name]}" for r in hide))
(work / "hide.txt").write_text("".join(r + "\n" for r in hide))

# Everything `pip install .` installs is in the repaired wheel (the dist-info's RECORD and
# WHEEL are rewritten by the repair, same names).
lost = sorted(set(raw_names) - set(names))
if lost:
    fail(f"the repair lost {lost}")
wanted = [r"tokenfeed/_tokenfeed\..*\.so", r"tokenfeed/_tokenfeed\.pyi", r"tokenfeed/py\.typed",
          r"tokenfeed/_bin/tokenfeed", r"tokenfeed/__init__\.py", r"tokenfeed/_cli\.py"]
for pattern in wanted:
    if not any(re.fullmatch(pattern, n) for n in names):
        fail(f"the wheel has no {pattern}")
z = zipfile.ZipFile(wheel)
dist = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
metadata = z.read(f"{dist}/METADATA").decode()
entry_points = z.read(f"{dist}/entry_points.txt").decode()
if "tokenfeed = tokenfeed._cli:main" not in entry_points:
    fail(f"no tokenfeed console script: {entry_points}")
if "Provides-Extra: hf" not in metadata or not re.search(r"Requires-Dist: tokenizers.*extra == .hf.", metadata):
    fail("the [hf] extra is not in the wheel's metadata")
print("contents: module, _tokenfeed.pyi, py.typed, _bin/tokenfeed, console script, [hf] extra")

policy = next(p for p in json.loads((Path(auditwheel.policy.__file__).parent / "manylinux-policy.json").read_text())
              if p["name"] == "_".join(tag.split("_")[:3]))
(work / "policy.txt").write_text("".join(n + "\n" for n in sorted(policy["lib_whitelist"])))

size = os.path.getsize(wheel)
members = sorted(z.infolist(), key=lambda i: -i.compress_size)[:5]
print(f"size {size / 2**20:.1f} MiB; largest members (compressed / installed):")
for i in members:
    print(f"  {i.compress_size / 2**20:5.1f} / {i.file_size / 2**20:5.1f} MiB  {i.filename}")
PY
mapfile -t hide <"$work/hide.txt"

log "installing the wheel into a fresh venv ($work/venv)"
"$PYTHON" -m venv "$work/venv"
vpy=$work/venv/bin/python
"$vpy" -m pip install --disable-pip-version-check -q "$wheel"
site=$(readlink -f "$("$vpy" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')")
[ -x "$work/venv/bin/tokenfeed" ] || fail "no tokenfeed console script in the venv"

# The wheel as built, before the repair: what a build against the system's libraries gives.
"$vpy" - "$raw" "$work/unrepaired" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        path = z.extract(info, sys.argv[2])
        mode = info.external_attr >> 16
        if mode:
            os.chmod(path, mode & 0o777)
PY

# ldd_in_wheel ELF ROOT: every library ELF loads is in the policy or under ROOT/tokenfeed.libs.
ldd_in_wheel() {
  local elf=$1 root=$2 soname path
  ldd "$elf" >"$work/ldd.out" 2>&1
  if grep -q "not found" "$work/ldd.out"; then echo "$elf: $(grep "not found" "$work/ldd.out")"; return 1; fi
  while read -r soname _ path _; do
    [ -n "$path" ] || continue
    path=$(readlink -f "$path")  # RUNPATH is $ORIGIN/../tokenfeed.libs
    case "$path" in "$root"/tokenfeed.libs/*) continue ;; esac
    if ! grep -qxF "$soname" "$work/policy.txt"; then
      echo "$(basename "$elf") loads $soname from $path: neither in the wheel nor in the policy"
      return 1
    fi
  done < <(grep "=>" "$work/ldd.out")
  echo "  $(basename "$elf"): $(grep -c "/tokenfeed.libs/" "$work/ldd.out") libraries from the wheel, the rest from the policy"
}
log "ldd: every library the installed ELF files load is in the policy or in the wheel"
for elf in "$site"/tokenfeed/_tokenfeed.*.so "$site/tokenfeed/_bin/tokenfeed"; do
  ldd_in_wheel "$elf" "$site" || fail "ldd"
done
# The check's control: the unrepaired ELF files load the system's libraries, which it refuses.
for elf in "$work"/unrepaired/tokenfeed/_tokenfeed.*.so "$work/unrepaired/tokenfeed/_bin/tokenfeed"; do
  if ldd_in_wheel "$elf" "$work/unrepaired" >"$work/ldd-control.out"; then
    fail "the ldd check passes the unrepaired $(basename "$elf"): it proves nothing"
  fi
  echo "  control: $(cat "$work/ldd-control.out")"
done

# The interpreter's own libraries cannot be hidden from it.
interp=$(readlink -f "$vpy")
mapfile -t interp_libs < <({ echo "$interp"; ldd "$interp" | awk '/=>/ {print $3}'; } | xargs -r readlink -f)
hidden=()
for lib in "${hide[@]}"; do
  if printf '%s\n' "${interp_libs[@]}" | grep -qxF "$lib"; then
    log "note: $interp itself links $lib; it stays visible (the ldd check above covers it)"
  else
    hidden+=("$lib")
  fi
done

# hiding "LIB..." CMD...: runs CMD in a private mount namespace with /dev/null bind-mounted
# over each LIB (a space-separated list); the mounts end with the namespace. `mount` loads
# libraries of its own (Debian's util-linux: libpcre2-8, through libselinux): one of those is
# hidden last, since no mount runs after it; two cannot be (status 97, saying so).
hiding() {
  HIDDEN=$1 unshare -m --propagation private -- bash -c '
    set -e
    own=$(ldd "$(command -v mount)" | awk "/=>/ {print \$3}" | xargs -r readlink -f)
    last=()
    for f in $HIDDEN; do
      if printf "%s\n" $own | grep -qxF "$f"; then last+=("$f"); else mount --bind /dev/null "$f"; fi
    done
    if [ ${#last[@]} -gt 1 ]; then echo "hiding: mount itself loads ${last[*]}: only one can be hidden" >&2; exit 97; fi
    for f in "${last[@]}"; do mount --bind /dev/null "$f"; done
    exec "$@"' hiding "${@:2}"
}
in_namespace() { hiding "${hidden[*]}" "$@"; }
control_exe=$work/unrepaired/tokenfeed/_bin/tokenfeed
control_module=(env PYTHONPATH="$work/unrepaired" "$vpy" -c "import tokenfeed; print(tokenfeed.__file__)")
mkdir -p "$work/smoke"
if unshare -m --propagation private true 2>/dev/null; then
  log "hiding ${#hidden[@]} system libraries in a private mount namespace: ${hidden[*]}"
  "$control_exe" --version >/dev/null || fail "control: the unrepaired executable does not run even unhidden"
  "${control_module[@]}" | grep -q "^$work/unrepaired/" || fail "control: the unrepaired module does not import even unhidden"
  # Each library on its own: hiding it alone stops the unrepaired executable, which names it.
  for lib in "${hidden[@]}"; do
    if hiding "$lib" "$control_exe" --version >"$work/control.out" 2>&1; then
      fail "the unrepaired executable runs with $lib hidden: the hiding does not bite"
    fi
    grep -q "$(basename "${lib%%.so*}").so.*file too short" "$work/control.out" ||
      fail "the unrepaired executable failed with $lib hidden, but not on it: $(cat "$work/control.out")"
    echo "  $(basename "$lib") hidden alone: the unrepaired executable fails: $(head -n 1 "$work/control.out" | sed 's/.*loading shared libraries: //')"
  done
  if in_namespace "${control_module[@]}" >"$work/control.out" 2>&1; then
    fail "the unrepaired module imports with the system libraries hidden: the hiding does not bite"
  fi
  echo "  the unrepaired module fails: $(tail -n 1 "$work/control.out")"
  log "the smoke suite, with the system libraries hidden"
  (cd "$work/smoke" && in_namespace "$vpy" "$repo/ci/wheel_smoke.py" "$repo" "$work/smoke") || fail "the smoke suite"
else
  log "unshare -m is not permitted here (it needs root or user namespaces): the system libraries are NOT hidden;"
  log "the ldd check above is the evidence that the wheel loads its own copies"
  (cd "$work/smoke" && "$vpy" "$repo/ci/wheel_smoke.py" "$repo" "$work/smoke") || fail "the smoke suite"
fi
log "passed in $((SECONDS - start)) s: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"
