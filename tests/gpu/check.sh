#!/bin/bash
# The real-GPU check: berth gives a container the node's NVIDIA GPU, by
# driver discovery and through CDI, as root and as an unprivileged user,
# and the container does real work on it. Run on a GPU node from the
# directory tests/gpu/bundle.sh made (it needs no compiler and no network):
#
#   bash BUNDLE/check.sh
#
# It first prints what the node has (driver libraries in the loader cache,
# device nodes, CDI specs, FUSE), then each step's output and a summary;
# the exit status is the number of failed steps.
set -u
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
W=${BERTH_GPU_WORK:-/tmp/berth-gpu}
rm -rf "$W"
mkdir -p "$W/cdi" "$W/store"
# A copy every user can read (the unprivileged steps run from it).
cp -a "$B" "$W/bundle"
chmod -R a+rX "$W"
B=$W/bundle
export PATH="$B/bin:$PATH" BERTH_SQUASHFUSE="$B/bin/squashfuse_ll" BERTH_TAR2SQFS="$B/bin/tar2sqfs"
shopt -s nullglob
export PATH="$B/bin:$PATH"
export BERTH_STORE="$W/store"
FAILED=()
section() { printf '\n=== %s\n' "$*"; }
step() { # step NAME EXPECT-REGEX CMD...: run, show, and match its output
    local name=$1 want=$2; shift 2
    section "$name: $*"
    local out rc
    out=$("$@" 2>&1); rc=$?
    printf '%s\n[exit %d]\n' "$out" "$rc"
    if [[ $rc -ne 0 && $want != '!fail' ]] || { [[ $want != '!fail' ]] && ! grep -Eq -- "$want" <<<"$out"; } \
        || [[ $want == '!fail' && $rc -eq 0 ]]; then
        FAILED+=("$name"); echo "[FAILED: $name]"
    else
        echo "[ok: $name]"
    fi
}

section "the node"
uname -a; grep PRETTY /etc/os-release; id
ldd --version 2>&1 | head -1
command -v nvidia-smi && nvidia-smi -L
echo "--- ldconfig -p | grep -i nvidia/cuda"; ldconfig -p | grep -Ei 'nvidia|libcuda' | head -40
echo "--- /dev"; ls -l /dev/nvidia* /dev/nvidia-caps 2>&1; ls -l /dev/fuse /dev/loop-control 2>&1
echo "--- CDI"; ls -l /etc/cdi /var/run/cdi 2>&1; command -v nvidia-ctk nvidia-container-cli 2>&1
echo "--- /proc/driver/nvidia"; ls /proc/driver/nvidia/gpus 2>&1; cat /proc/driver/nvidia/gpus/*/information 2>&1 | head -20
echo "--- mounts"; grep -E 'nvidia|cuda' /proc/self/mountinfo | head
echo "--- userns"; cat /proc/sys/user/max_user_namespaces /proc/sys/kernel/unprivileged_userns_clone 2>&1
grep -E 'squashfs|fuse' /proc/filesystems

# Where this node keeps its driver: in the loader cache (a standard
# install), or only in a directory on LD_LIBRARY_PATH (a container image
# with the driver mounted in): then the check writes a cache of that
# directory and names it in [host], as a site would.
LDCACHE=/etc/ld.so.cache
if ! ldconfig -p | grep -q 'libcuda.so.1 '; then
    d=$(dirname "$(find / -xdev -name 'libcuda.so.1' -not -path '/proc/*' 2>/dev/null | head -1)" 2>/dev/null)
    for p in /usr/local/nvidia/lib64 /usr/local/nvidia/lib "$d"; do
        [[ -e $p/libcuda.so.1 ]] || continue
        ldconfig -C "$W/ld.so.cache" -f /dev/null "$p" 2>/dev/null || ldconfig -C "$W/ld.so.cache" "$p"
        LDCACHE=$W/ld.so.cache; echo "libcuda.so.1 is not in the loader cache; using a cache of $p"; break
    done
fi
SMI=$(command -v nvidia-smi || echo /usr/bin/nvidia-smi)
# Two configurations: discovery (no CDI spec in reach, unless the node has
# its own) and CDI (the spec below too); --gpus takes CDI where a spec is.
for c in discovery cdi; do
    dirs='"/etc/cdi", "/var/run/cdi"'
    [[ $c == cdi ]] && dirs+=", \"$W/cdi\""
    cat > "$W/$c.toml" <<TOML
[host]
ld_cache = "$LDCACHE"
cdi_spec_dirs = [$dirs]
bin_dirs = ["$(dirname "$SMI")", "/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin"]
TOML
done
export BERTH_SYSTEM_CONFIG=$W/discovery.toml
cat "$W/cdi.toml"

step native 'devices=[1-9].*' "$B/bin/cuda-probe"
step import '' berth import -q "oci:$B/image:latest" gpu-probe
step "root, no --gpus (no driver inside)" '!fail' berth run gpu-probe cuda-probe
step "root, --gpus all (discovery)" 'kernel=ok' berth run --gpus all gpu-probe cuda-probe
step "root, --gpus all nvidia-smi" 'GPU 0' berth run --gpus all gpu-probe nvidia-smi -L
step "root, --gpus 0" 'kernel=ok' berth run --gpus 0 gpu-probe cuda-probe
UUID=$(grep -h 'GPU UUID' /proc/driver/nvidia/gpus/*/information 2>/dev/null | head -1 | awk '{print $NF}')
[[ -z $UUID ]] && UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -1)
[[ -n $UUID ]] && step "root, --gpus $UUID" 'kernel=ok' berth run --gpus "$UUID" gpu-probe cuda-probe
step "dry run" 'libcuda' berth run --dry-run --gpus all gpu-probe cuda-probe

# CDI: the node's own spec if it has one, else one written here from what
# the node has, in the form nvidia-ctk writes.
specs=(/etc/cdi/*.json /etc/cdi/*.yaml /var/run/cdi/*.json /var/run/cdi/*.yaml)
if [[ ${#specs[@]} -eq 0 ]]; then
    if command -v nvidia-ctk >/dev/null; then
        nvidia-ctk cdi generate --output="$W/cdi/nvidia.yaml" >/dev/null 2>&1
    fi
    if [[ ! -s $W/cdi/nvidia.yaml ]]; then
        {
            echo 'cdiVersion: "0.6.0"'
            echo 'kind: nvidia.com/gpu'
            echo 'devices:'
            echo '  - name: all'
            echo '    containerEdits:'
            echo '      deviceNodes:'
            for n in /dev/nvidia[0-9]*; do echo "        - path: $n"; done
            echo 'containerEdits:'
            echo '  env: [NVIDIA_VISIBLE_DEVICES=void]'
            echo '  deviceNodes:'
            for n in /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools; do
                [[ -e $n ]] && echo "    - path: $n"
            done
            echo '  mounts:'
            ldconfig -p -C "$LDCACHE" | awk '/(libcuda|libnvidia-ml|libnvidia-ptxjitcompiler|libnvidia-nvvm)\.so\.1 .*x86-64/ {print $NF}' |
                while read -r f; do echo "$(readlink -f "$f") $(basename "$f")"; done | sort -u |
                while read -r real name; do
                    echo "    - {hostPath: $real, containerPath: /usr/lib/x86_64-linux-gnu/$name, options: [ro, nosuid, nodev, bind]}"
                done
            echo "    - {hostPath: $SMI, containerPath: /usr/bin/nvidia-smi, options: [ro, nosuid, nodev, bind]}"
        } > "$W/cdi/nvidia.yaml"
    fi
    echo "--- the CDI spec used"; head -60 "$W/cdi/nvidia.yaml"
fi
export BERTH_SYSTEM_CONFIG=$W/cdi.toml
step "berth modules (CDI devices)" 'nvidia.com/gpu' berth modules
step "root, --device nvidia.com/gpu=all (CDI)" 'kernel=ok' berth run --device nvidia.com/gpu=all gpu-probe cuda-probe
step "root, --gpus all (CDI)" 'kernel=ok' berth run --gpus all gpu-probe cuda-probe
step "root, --gpus all nvidia-smi (CDI)" 'GPU 0' berth run --gpus all gpu-probe nvidia-smi -L

# Rootless: an unprivileged user, FUSE inside a user namespace.
if [[ $(id -u) -eq 0 ]]; then
    chmod 0666 /dev/fuse 2>/dev/null
    U=berthgpu
    id "$U" >/dev/null 2>&1 || useradd -m "$U" 2>/dev/null || useradd "$U"
    UH=$W/home; mkdir -p "$UH"; chown "$U" "$UH"
    # shellcheck disable=SC2317   # called through step
    as_user() { setpriv --reuid="$U" --regid="$U" --init-groups env -i HOME="$UH" PATH="$PATH" \
        BERTH_SQUASHFUSE="$BERTH_SQUASHFUSE" BERTH_TAR2SQFS="$BERTH_TAR2SQFS" BERTH_SYSTEM_CONFIG="${CONF:-$W/discovery.toml}" \
        BERTH_STORE="$UH/store" XDG_RUNTIME_DIR="$UH/run" "$@"; }
    mkdir -p "$UH/run"; chown "$U" "$UH/run"; chmod 0700 "$UH/run"
    step "user: import" '' as_user berth import -q "oci:$B/image:latest" gpu-probe
    step "user: --gpus all (discovery, FUSE)" 'kernel=ok' as_user berth run --gpus all gpu-probe cuda-probe
    step "user: nvidia-smi (discovery)" 'GPU 0' as_user berth run --gpus all gpu-probe nvidia-smi -L
    # Four tasks sharing one container (berth run --shared, the Slurm
    # plugin's default mode), each doing real work on the GPU.
    # shellcheck disable=SC2317   # called through step
    shared_tasks() {
        local i
        for i in 1 2 3 4; do
            as_user berth run --shared gpu4 --gpus all gpu-probe \
                sh -c 'readlink /proc/self/ns/mnt; exec cuda-probe' > "$W/shared.$i" 2>&1 &
        done
        wait
        cat "$W"/shared.*
        echo "$(grep -l 'kernel=ok' "$W"/shared.* | wc -l) of 4 tasks ok in $(grep -h '^mnt:' "$W"/shared.* | sort -u | wc -l) mount namespace(s)"
    }
    step "user: 4 tasks in one shared container" '4 of 4 tasks ok' shared_tasks
    CONF=$W/cdi.toml
    step "user: --device nvidia.com/gpu=all (CDI)" 'kernel=ok' as_user berth run --device nvidia.com/gpu=all gpu-probe cuda-probe
    step "user: nvidia-smi (CDI)" 'GPU 0' as_user berth run --gpus all gpu-probe nvidia-smi -L
    CONF=
fi

# Cost: the probe's wall time natively and in a container (cuInit dominates).
section "timing (10 runs each, ms)"
t() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
for what in native discovery cdi; do
    ts=()
    for i in 1 2 3 4 5 6 7 8 9 10; do
        case $what in
            native) ts+=("$(t "$B/bin/cuda-probe")") ;;
            *) ts+=("$(BERTH_SYSTEM_CONFIG=$W/$what.toml t berth run --gpus all gpu-probe cuda-probe)") ;;
        esac
    done
    echo "$what: $(printf '%s\n' "${ts[@]}" | sort -n | tr '\n' ' ') (median $(printf '%s\n' "${ts[@]}" | sort -n | sed -n 6p))"
done

section "summary"
if [[ ${#FAILED[@]} -eq 0 ]]; then echo "all steps passed"; else printf 'FAILED: %s\n' "${FAILED[@]}"; fi
exit "${#FAILED[@]}"
