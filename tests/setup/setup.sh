#!/bin/bash
# Set up the environment for berth's integration tests (run as root).
#
#  - installs the tools the tests and fixtures need (only when missing)
#  - makes /dev/fuse usable by everyone, creates the unprivileged user
#    berthtest (with a subuid/subgid range)
#  - builds the image fixtures (make_images.py) under $BERTH_IT_DIR/fixtures
#  - (re)starts three local docker-registry instances, anonymous on
#    127.0.0.1:5000, htpasswd-protected on 127.0.0.1:5001 and bearer-token
#    protected on 127.0.0.1:5002 (token server token_server.py on
#    127.0.0.1:5003), and pushes the images to them
#  - starts a Docker daemon (Debian's docker.io) whose socket the test
#    user may use, for `berth import docker-daemon:`
#  - writes $BERTH_IT_DIR/env (KEY=VALUE lines) for the tests
#
# Idempotent: every run stops the registries of the previous run (see
# teardown.sh), and rebuilds fixtures and registry storage from scratch,
# so it also undoes any tampering a test did.
set -Eeuo pipefail

BERTH_IT_DIR=${BERTH_IT_DIR:-/tmp/berth-it}
export BERTH_IT_DIR

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FIXTURES=$BERTH_IT_DIR/fixtures
LOG_DIR=$BERTH_IT_DIR/logs
RUN_DIR=$BERTH_IT_DIR/run
REG_DIR=$BERTH_IT_DIR/registry

REG_ANON=127.0.0.1:5000
REG_AUTH=127.0.0.1:5001
REG_TOKEN=127.0.0.1:5002
TOKEN_SERVER=127.0.0.1:5003
TOKEN_SERVICE=berth-test-registry
TOKEN_ISSUER=berth-test-issuer
REG_USER=berth
REG_PASS=s3cret-pass
TEST_USER=berthtest
# A second unprivileged user: another user of the node, for the attacks
# of one user on another (a pre-created runtime directory, planted records).
OTHER_USER=berthother
REPO=berth-test

PACKAGES=(squashfs-tools-ng squashfs-tools skopeo umoci docker-registry
          apache2-utils busybox-static zstd squashfuse fuse3 fuse-overlayfs jq python3
          curl gzip debootstrap podman buildah runc uidmap catatonit openssl gcc libc6-dev mpich libmpich-dev
          slurm-wlm munge openmpi-bin libopenmpi-dev libpmix-dev
          shellcheck flake8 golang-go golang-github-sylabs-sif-dev tinyproxy docker.io rpm
          dropbear-bin)

die() { echo "setup.sh: ERROR: $*" >&2; exit 1; }
trap 'echo "setup.sh: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
log() { echo "setup.sh: $*"; }
# install_packages, add_user, test_user (with SUBID_RANGE)
# shellcheck source=tests/setup/lib.sh
source "$HERE/lib.sh"

[[ $(id -u) == 0 ]] || die "must run as root"
umask 022

# --------------------------------------------------------------------------
# Packages
# --------------------------------------------------------------------------
install_packages "${PACKAGES[@]}"
for t in skopeo umoci htpasswd zstd jq curl python3 openssl /bin/busybox \
         /usr/bin/docker-registry; do
    command -v "$t" >/dev/null || die "$t not found after installing packages"
done

# --------------------------------------------------------------------------
# FUSE and the unprivileged test user
# --------------------------------------------------------------------------
if [[ -e /dev/fuse ]]; then chmod 0666 /dev/fuse; fi

test_user "$TEST_USER"
add_user "$OTHER_USER"

# --------------------------------------------------------------------------
# Work dir; stop the registries of a previous run
# --------------------------------------------------------------------------
mkdir -p "$BERTH_IT_DIR" "$LOG_DIR" "$RUN_DIR"
touch "$BERTH_IT_DIR/.berth-it"     # marker for teardown.sh --purge
chmod 0755 "$BERTH_IT_DIR" "$LOG_DIR" "$RUN_DIR"
rm -f "$BERTH_IT_DIR/env"

"$HERE/teardown.sh" || die "could not stop the registries of a previous run"

# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------
log "building fixtures in $FIXTURES"
python3 "$HERE/make_images.py" || die "make_images.py failed"

# --------------------------------------------------------------------------
# Registries
# --------------------------------------------------------------------------

# write_config NAME PORT [htpasswd|token]: registry config under $REG_DIR/NAME
write_config() {
    local name=$1 port=$2 auth=${3:-} dir=$REG_DIR/$1
    cat > "$dir/config.yml" <<EOF
# docker-registry for berth integration tests ($name), made by setup.sh
version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:$port
  secret: berth-integration-tests
health:
  storagedriver:
    enabled: false
EOF
    case $auth in
    '') ;;
    htpasswd)
        cat >> "$dir/config.yml" <<EOF
auth:
  htpasswd:
    realm: berth-test
    path: $dir/htpasswd
EOF
        ;;
    token)
        cat >> "$dir/config.yml" <<EOF
auth:
  token:
    realm: http://$TOKEN_SERVER/token
    service: $TOKEN_SERVICE
    issuer: $TOKEN_ISSUER
    rootcertbundle: $dir/issuer.crt
EOF
        ;;
    *) die "write_config: unknown auth '$auth'" ;;
    esac
}

# start_registry NAME PORT EXPECTED_HTTP_STATUS_OF_/v2/
start_registry() {
    local name=$1 port=$2 want=$3 dir=$REG_DIR/$1 pid code i
    local log_file=$LOG_DIR/registry-$name.log
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "port $port is already in use by a process setup.sh did not start" \
            "(the packaged docker-registry service? try: systemctl stop docker-registry)"
    fi
    # setsid: own session, so the registry outlives this script's job.
    setsid /usr/bin/docker-registry serve "$dir/config.yml" \
        > "$log_file" 2>&1 < /dev/null &
    pid=$!
    echo "$pid" > "$RUN_DIR/registry-$name.pid"
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || {
            tail -n 20 "$log_file" >&2
            die "registry $name exited at startup, see $log_file"
        }
        code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v2/" || true)
        if [[ $code == "$want" ]]; then
            log "registry $name up on 127.0.0.1:$port (pid $pid, /v2/ -> $code)"
            return 0
        fi
        sleep 0.2
    done
    tail -n 20 "$log_file" >&2
    die "registry $name on port $port: /v2/ answered '$code', expected $want"
}

# start_token_server: token_server.py on $TOKEN_SERVER, signing with the
# key under $REG_DIR/token (see write_config token).
start_token_server() {
    local dir=$REG_DIR/token pid code i
    local log_file=$LOG_DIR/token-server.log
    local url="http://$TOKEN_SERVER/token?service=$TOKEN_SERVICE"
    if (exec 3<>"/dev/tcp/${TOKEN_SERVER%:*}/${TOKEN_SERVER##*:}") 2>/dev/null; then
        die "port ${TOKEN_SERVER##*:} is already in use by a process setup.sh did not start"
    fi
    # teardown.sh recognises it by "token_server.py --key $BERTH_IT_DIR/registry/...".
    setsid python3 "$HERE/token_server.py" --key "$dir/issuer.key" \
        --cert "$dir/issuer.crt" --listen "$TOKEN_SERVER" \
        --service "$TOKEN_SERVICE" --issuer "$TOKEN_ISSUER" \
        --user "$REG_USER" --password "$REG_PASS" \
        > "$log_file" 2>&1 < /dev/null &
    pid=$!
    echo "$pid" > "$RUN_DIR/token-server.pid"
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || {
            tail -n 20 "$log_file" >&2
            die "token server exited at startup, see $log_file"
        }
        code=$(curl -s -o /dev/null -w '%{http_code}' "$url" || true)
        if [[ $code == 200 ]]; then
            log "token server up on $TOKEN_SERVER (pid $pid)"
            return 0
        fi
        sleep 0.2
    done
    tail -n 20 "$log_file" >&2
    die "token server on $TOKEN_SERVER: anonymous /token answered '$code', expected 200"
}

rm -rf "$REG_DIR"
mkdir -p "$REG_DIR/anon/storage" "$REG_DIR/auth/storage" "$REG_DIR/token/storage"
write_config anon 5000
write_config auth 5001 htpasswd
write_config token 5002 token
htpasswd -Bbn "$REG_USER" "$REG_PASS" > "$REG_DIR/auth/htpasswd"
# The token issuer's RSA key and self-signed certificate: the registry's
# rootcertbundle, and the x5c chain in every token's header.
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$TOKEN_ISSUER" \
    -keyout "$REG_DIR/token/issuer.key" -out "$REG_DIR/token/issuer.crt" 2>/dev/null \
    || die "openssl could not make the token issuer's key and certificate"
chmod -R a+rX "$REG_DIR"
chmod 0600 "$REG_DIR/token/issuer.key"
start_registry anon 5000 200
start_registry auth 5001 401
start_token_server
start_registry token 5002 401
curl -sI "http://$REG_TOKEN/v2/" | tr -d '\r' \
    | grep -qixF "www-authenticate: bearer realm=\"http://$TOKEN_SERVER/token\",service=\"$TOKEN_SERVICE\"" \
    || die "registry token on $REG_TOKEN does not ask for a bearer token from $TOKEN_SERVER"

# --------------------------------------------------------------------------
# Push
# --------------------------------------------------------------------------
SKOPEO=(skopeo --insecure-policy)

# push NAME DEST_REGISTRY [skopeo copy options...]
# Copies oci:$FIXTURES/oci/NAME:latest to DEST/berth-test/NAME:latest.
push() {
    local name=$1 reg=$2
    shift 2
    "${SKOPEO[@]}" copy --quiet --all --dest-tls-verify=false "$@" \
        "oci:$FIXTURES/oci/$name:latest" "docker://$reg/$REPO/$name:latest" \
        || die "pushing $name to $reg failed"
}

# raw_manifest REF [skopeo inspect options...]: manifest bytes into $TMP_MAN
TMP_MAN=$BERTH_IT_DIR/run/manifest.tmp
raw_manifest() {
    local ref=$1
    shift
    "${SKOPEO[@]}" inspect --raw --tls-verify=false "$@" "docker://$ref" > "$TMP_MAN" \
        || die "skopeo inspect $ref failed"
}

# verify_same NAME REG [creds options]: the registry serves byte-identical
# manifests (hence the same digests, compression and media types).
verify_same() {
    local name=$1 reg=$2 want got
    shift 2
    want=$(jq -r '.manifests[0].digest' "$FIXTURES/oci/$name/index.json")
    raw_manifest "$reg/$REPO/$name:latest" "$@"
    got=sha256:$(sha256sum < "$TMP_MAN" | cut -d' ' -f1)
    [[ $got == "$want" ]] \
        || die "$reg/$REPO/$name:latest has manifest digest $got, layout has $want"
}

log "pushing images"
if [[ $("${SKOPEO[@]}" copy --help) == *--preserve-digests* ]]; then
    PRESERVE=(--preserve-digests)
else
    PRESERVE=()   # older skopeo: verify_same below still checks the digests
fi

mapfile -t EVIL < <(cut -f1 "$FIXTURES/evil.txt")
for name in layers multiarch hostfiles "${EVIL[@]}"; do
    push "$name" "$REG_ANON" "${PRESERVE[@]}"
    verify_same "$name" "$REG_ANON"
done
push layers "$REG_AUTH" "${PRESERVE[@]}" --dest-creds "$REG_USER:$REG_PASS"
verify_same layers "$REG_AUTH" --creds "$REG_USER:$REG_PASS"
push layers "$REG_TOKEN" "${PRESERVE[@]}" --dest-creds "$REG_USER:$REG_PASS"
verify_same layers "$REG_TOKEN" --creds "$REG_USER:$REG_PASS"
# The token registry must refuse anonymous and wrong-password readers.
for creds in "" "--creds=$REG_USER:wrong-$REG_PASS"; do
    if "${SKOPEO[@]}" inspect --raw --tls-verify=false ${creds:+"$creds"} \
        "docker://$REG_TOKEN/$REPO/layers:latest" > /dev/null 2>&1; then
        die "registry token served layers to ${creds:-an anonymous client}"
    fi
done

# docker-v2s2: converted on the way, so only the media types are checked.
push docker-v2s2 "$REG_ANON" --format v2s2
raw_manifest "$REG_ANON/$REPO/docker-v2s2:latest"
jq -e '.mediaType == "application/vnd.docker.distribution.manifest.v2+json"
       and (.layers | all(.mediaType ==
            "application/vnd.docker.image.rootfs.diff.tar.gzip"))' \
    "$TMP_MAN" > /dev/null || die "docker-v2s2 was not stored as Docker v2 schema 2"

# Show what the registry holds for the multi-compression image and the index.
raw_manifest "$REG_ANON/$REPO/layers:latest"
log "layers layer media types: $(jq -r '[.layers[].mediaType] | join(", ")' "$TMP_MAN")"
raw_manifest "$REG_ANON/$REPO/multiarch:latest"
log "multiarch: $(jq -r '.mediaType + " [" + ([.manifests[].platform |
    .os + "/" + .architecture + (if .variant then "/" + .variant else "" end)]
    | join(", ")) + "]"' "$TMP_MAN")"
rm -f "$TMP_MAN"

# The Debian + python3 image for the runtime tests (debootstrap, cached).
"$HERE/debian_image.sh" "$REG_ANON" || die "building the Debian test image failed"

# Images made by umoci insert/raw add-layer, GNU tar, buildah and podman,
# each with umoci's unpacking as the oracle.
"$HERE/producer_images.sh" "$REG_ANON" "$FIXTURES" || die "building the producer images failed"

# A fake NVIDIA driver tree, its CDI spec, and an image with a driver-API
# probe, for the host-resource tests.
"$HERE/fake_gpu.sh" "$BERTH_IT_DIR/fakegpu" "$REG_ANON" || die "building the fake GPU tree failed"

# Images with an MPI of their own (MPICH) and with stub MPI libraries of
# other ABIs, for the MPI bind-model tests (the host MPI is Debian's MPICH).
"$HERE/mpi_images.sh" "$REG_ANON" || die "building the MPI test images failed"

# SIF files written by the reference SIF library, and squashfs files as
# Apptainer and enroot lay them out.
"$HERE/sif_images.sh" "$FIXTURES/sif" || die "building the SIF fixtures failed"

# A real Slurm cluster on this machine: munged, slurmctld and three slurmd
# "nodes", all under $BERTH_IT_DIR/slurm (stopped by teardown.sh).
"$HERE/slurm_cluster.sh" up "$BERTH_IT_DIR/slurm" 3 || die "starting the Slurm test cluster failed"

# Rootless podman for the test user, to compare Docker semantics with
# (see ../shared/notes: no systemd, so cgroupfs and file events; host
# network; the loopback registry is plain HTTP). Its state stays under
# $BERTH_IT_DIR/podman.
PODMAN_HOME=$BERTH_IT_DIR/podman
rm -rf "$PODMAN_HOME"
install -d -m 0700 -o "$TEST_USER" -g "$TEST_USER" "$PODMAN_HOME" "$PODMAN_HOME/runtime" \
    "$PODMAN_HOME/data" "$PODMAN_HOME/config" "$PODMAN_HOME/config/containers"
cat > "$PODMAN_HOME/config/containers/containers.conf" <<EOF
[containers]
netns = "host"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
EOF
cat > "$PODMAN_HOME/config/containers/registries.conf" <<EOF
unqualified-search-registries = []
[[registry]]
location = "$REG_ANON"
insecure = true
EOF
chown -R "$TEST_USER:$TEST_USER" "$PODMAN_HOME"

# A real Docker daemon (Debian's docker.io) for `berth import
# docker-daemon:`, its state and socket under $BERTH_IT_DIR/docker; no
# networking of its own (no iptables, no bridge: it only stores images).
# The test user reaches the socket as a site's docker group would.
DOCKER_DIR=$BERTH_IT_DIR/docker
start_dockerd() {
    local sock=$DOCKER_DIR/docker.sock pid i
    rm -rf "$DOCKER_DIR"
    install -d -m 0755 "$DOCKER_DIR"
    setsid /usr/sbin/dockerd --host "unix://$sock" --data-root "$DOCKER_DIR/root" \
        --exec-root "$DOCKER_DIR/exec" --pidfile "$DOCKER_DIR/dockerd.pid" \
        --iptables=false --ip6tables=false --bridge=none --storage-driver=vfs \
        > "$LOG_DIR/dockerd.log" 2>&1 < /dev/null &
    pid=$!
    echo "$pid" > "$RUN_DIR/dockerd.pid"
    for ((i = 0; i < 300; i++)); do
        kill -0 "$pid" 2>/dev/null || die "dockerd exited; see $LOG_DIR/dockerd.log"
        if DOCKER_HOST=unix://$sock docker version > /dev/null 2>&1; then
            chgrp "$TEST_USER" "$sock" && chmod 0660 "$sock"
            log "dockerd up on $sock (pid $pid)"
            return 0
        fi
        sleep 0.1
    done
    die "dockerd did not answer on $sock in 30 s; see $LOG_DIR/dockerd.log"
}
start_dockerd

# --------------------------------------------------------------------------
# Environment for the tests
# --------------------------------------------------------------------------
cat > "$BERTH_IT_DIR/env.tmp" <<EOF
BERTH_IT_DIR=$BERTH_IT_DIR
BERTH_IT_REG_ANON=$REG_ANON
BERTH_IT_REG_AUTH=$REG_AUTH
BERTH_IT_REG_TOKEN=$REG_TOKEN
BERTH_IT_TOKEN_REALM=http://$TOKEN_SERVER/token
BERTH_IT_REG_USER=$REG_USER
BERTH_IT_REG_PASS=$REG_PASS
BERTH_IT_USER=$TEST_USER
BERTH_IT_OTHER_USER=$OTHER_USER
BERTH_IT_FIXTURES=$FIXTURES
BERTH_IT_REG_ANON_STORAGE=$REG_DIR/anon/storage
BERTH_IT_REG_AUTH_STORAGE=$REG_DIR/auth/storage
BERTH_IT_REG_TOKEN_STORAGE=$REG_DIR/token/storage
BERTH_IT_PODMAN_HOME=$PODMAN_HOME
BERTH_IT_DOCKER_HOST=unix://$DOCKER_DIR/docker.sock
BERTH_IT_FAKEGPU=$BERTH_IT_DIR/fakegpu
BERTH_IT_SIF=$FIXTURES/sif
BERTH_IT_SLURM_CONF=$BERTH_IT_DIR/slurm/slurm.conf
EOF
chmod 0644 "$BERTH_IT_DIR/env.tmp"
mv "$BERTH_IT_DIR/env.tmp" "$BERTH_IT_DIR/env"

log "done; environment in $BERTH_IT_DIR/env, stop registries with $HERE/teardown.sh"
