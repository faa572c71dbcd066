#!/usr/bin/env python3
"""Build the OCI image fixtures for berth's integration tests.

Python standard library only, plus the umoci, skopeo and zstd binaries.
Run as root (umoci unpacks without --rootless so that owners are kept).

Everything is (re)built from scratch under $BERTH_IT_DIR/fixtures
(default /tmp/berth-it/fixtures):

  oci/NAME/                  one OCI image layout per image, tag "latest"
  oracle/NAME/               rootfs that `umoci unpack` makes of each good image
  layers.oci-archive.tar     the `layers` image as written by skopeo oci-archive:
  layers.docker-archive.tar  the `layers` image as written by skopeo docker-archive:
  images.txt                 names of the good images, one per line
  evil.txt                   NAME<TAB>offending tar entry name, one per line
  dropped-devices.txt        device nodes berth must drop (IMAGE<TAB>path)

See tests/setup/README.md for what each image contains.
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

IT_DIR = Path(os.environ.get("BERTH_IT_DIR", "/tmp/berth-it"))
FIX = IT_DIR / "fixtures"
WORK = IT_DIR / "work"  # scratch space, removed when done

# Fixed timestamps keep the hand-crafted layers and configs reproducible.
MTIME = 1700000000
CREATED = "2024-01-01T00:00:00Z"

PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = {
    "none": "application/vnd.oci.image.layer.v1.tar",
    "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
}

# busybox applets linked into the base layer (all -> busybox).  The first
# line is the set the tests rely on, the second is a convenience for
# writing test commands.
APPLETS = ["sh", "ls", "cat", "echo", "true", "false", "id", "env", "sleep",
           "stat", "readlink", "head", "wc", "pwd", "uname", "touch", "mkdir",
           "rm", "find", "grep", "test"]


def log(msg):
    print(f"make_images: {msg}", flush=True)


def run(*cmd, **kw):
    """Run a command, failing loudly (with its stderr) if it fails."""
    res = subprocess.run([str(c) for c in cmd], capture_output=True, **kw)
    if res.returncode != 0:
        sys.stderr.write(res.stderr.decode(errors="replace"))
        raise SystemExit(f"make_images: command failed ({res.returncode}): "
                         + " ".join(str(c) for c in cmd))
    return res.stdout


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def jdump(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def compress(raw, comp):
    if comp == "none":
        return raw
    if comp == "gzip":
        return gzip.compress(raw, mtime=0)
    if comp == "zstd":
        return run("zstd", "-q", "-c", "-19", input=raw)
    raise ValueError(comp)


# --------------------------------------------------------------------------
# OCI image layout writer
# --------------------------------------------------------------------------

class Layout:
    """Minimal OCI image layout: blobs/sha256, oci-layout, index.json."""

    def __init__(self, path):
        self.path = Path(path)
        (self.path / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (self.path / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        self.refs = []
        self._write_index()

    def put(self, data, media_type):
        digest = sha256(data)
        (self.path / "blobs" / "sha256" / digest[7:]).write_bytes(data)
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    def tag(self, name, desc):
        desc = dict(desc)
        desc["annotations"] = {"org.opencontainers.image.ref.name": name}
        self.refs = [d for d in self.refs
                     if d["annotations"]["org.opencontainers.image.ref.name"] != name]
        self.refs.append(desc)
        self._write_index()

    def _write_index(self):
        (self.path / "index.json").write_bytes(jdump(
            {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": self.refs}))


def read_layout_manifest(layout, tag):
    """(manifest, config) of tag in a layout written by someone else (umoci)."""
    layout = Path(layout)
    index = json.loads((layout / "index.json").read_text())
    for d in index["manifests"]:
        if d.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            man = json.loads((layout / "blobs/sha256" / d["digest"][7:]).read_bytes())
            return man
    raise SystemExit(f"make_images: tag {tag} not found in {layout}")


def layer_tars(layout, tag):
    """Uncompressed layer tarballs of an image in a umoci-written layout."""
    out = []
    for d in read_layout_manifest(layout, tag)["layers"]:
        blob = (Path(layout) / "blobs/sha256" / d["digest"][7:]).read_bytes()
        if d["mediaType"].endswith("+gzip"):
            blob = gzip.decompress(blob)
        out.append(blob)
    return out


class Layer:
    def __init__(self, raw, comp, created_by):
        self.raw, self.comp, self.created_by = raw, comp, created_by


def write_image(layout, layers, config, platform=("amd64", "linux", None),
                force_comp=None):
    """Write layer blobs, config and manifest; return the manifest descriptor.

    force_comp overrides every layer's compression (used for the umoci
    oracle, since umoci 0.4.7 cannot read zstd layers).
    """
    arch, os_, variant = platform
    cfg = {"created": CREATED, "architecture": arch, "os": os_,
           "config": config,
           "rootfs": {"type": "layers",
                      "diff_ids": [sha256(layer.raw) for layer in layers]},
           "history": [{"created": CREATED, "created_by": layer.created_by}
                       for layer in layers]}
    if variant:
        cfg["variant"] = variant
    layer_descs = []
    for layer in layers:
        comp = force_comp or layer.comp
        layer_descs.append(layout.put(compress(layer.raw, comp), MT_LAYER[comp]))
    manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST,
                "config": layout.put(jdump(cfg), MT_CONFIG),
                "layers": layer_descs}
    desc = layout.put(jdump(manifest), MT_MANIFEST)
    plat = {"architecture": arch, "os": os_}
    if variant:
        plat["variant"] = variant
    desc["platform"] = plat
    return desc


# --------------------------------------------------------------------------
# Hand-crafted tar layers
# --------------------------------------------------------------------------

class TarBuilder:
    """Write tar entries exactly as given (names are not normalised)."""

    def __init__(self, fmt=tarfile.PAX_FORMAT):
        self.buf = io.BytesIO()
        self.tf = tarfile.open(fileobj=self.buf, mode="w", format=fmt)

    def _add(self, name, typ, mode, data=b"", uid=0, gid=0, linkname="",
             devmajor=0, devminor=0):
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.uid, ti.gid = typ, mode, uid, gid
        ti.uname = ti.gname = ""
        ti.mtime, ti.linkname = MTIME, linkname
        ti.devmajor, ti.devminor = devmajor, devminor
        ti.size = len(data) if typ == tarfile.REGTYPE else 0
        self.tf.addfile(ti, io.BytesIO(data) if typ == tarfile.REGTYPE else None)

    def dir(self, name, mode=0o755, **kw):
        self._add(name, tarfile.DIRTYPE, mode, **kw)

    def file(self, name, data=b"", mode=0o644, **kw):
        self._add(name, tarfile.REGTYPE, mode, data=data, **kw)

    def symlink(self, name, target):
        self._add(name, tarfile.SYMTYPE, 0o777, linkname=target)

    def hardlink(self, name, target):
        self._add(name, tarfile.LNKTYPE, 0o644, linkname=target)

    def fifo(self, name, mode=0o644):
        self._add(name, tarfile.FIFOTYPE, mode)

    def chardev(self, name, major, minor, mode=0o666):
        self._add(name, tarfile.CHRTYPE, mode, devmajor=major, devminor=minor)

    def bytes(self):
        self.tf.close()
        return self.buf.getvalue()


def raw_entry_names(tar_bytes):
    """Entry names as stored in the tar headers (ustar/GNU 'L'/PAX 'path').

    Used to check that tarfile did not rewrite any of the evil names.
    """
    names, pos, long_name, pax_name = [], 0, None, None
    while pos + 512 <= len(tar_bytes):
        hdr = tar_bytes[pos:pos + 512]
        if hdr == b"\0" * 512:
            break
        size = int(hdr[124:136].split(b"\0")[0].strip() or b"0", 8)
        typ = hdr[156:157]
        body = tar_bytes[pos + 512:pos + 512 + size]
        pos += 512 + (size + 511) // 512 * 512
        if typ == b"L":
            long_name = body.rstrip(b"\0").decode()
            continue
        if typ == b"x":
            for rec in body.decode().splitlines():
                _, kv = rec.split(" ", 1)
                if kv.startswith("path="):
                    pax_name = kv[5:]
            continue
        name = hdr[0:100].split(b"\0")[0].decode()
        prefix = hdr[345:500].split(b"\0")[0].decode()
        if prefix:
            name = prefix + "/" + name
        names.append(pax_name or long_name or name)
        long_name = pax_name = None
    return names


# --------------------------------------------------------------------------
# Layers made with umoci
# --------------------------------------------------------------------------

def populate_base(root):
    """busybox, minimal /etc, /tmp, /work, plus things layer 2 deletes."""
    root = Path(root)
    for d in ("bin", "etc", "root", "work", "usr/share/removeme/sub"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2("/bin/busybox", root / "bin/busybox")
    os.chmod(root / "bin/busybox", 0o755)
    for a in APPLETS:
        os.symlink("busybox", root / "bin" / a)
    (root / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\n"
        "app:x:1000:1000:app:/work:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
    (root / "etc/group").write_text(
        "root:x:0:\napp:x:1000:\nnogroup:x:65534:\n")
    (root / "etc/motd").write_text("deleted in layer 2\n")
    for f in ("a.txt", "b.txt", "sub/c.txt"):
        (root / "usr/share/removeme" / f).write_text(f"{f} deleted in layer 2\n")
    (root / "tmp").mkdir(mode=0o755)
    os.chmod(root / "tmp", 0o1777)
    os.chmod(root / "root", 0o700)
    for p in [root, *sorted(root.rglob("*"))]:
        if p.is_dir() and not p.is_symlink() and p.name not in ("tmp", "root"):
            os.chmod(p, 0o755)


HOST_PATHS = [  # copied verbatim when present on the host
    "/etc/os-release", "/usr/lib/os-release",
    "/usr/share/zoneinfo", "/usr/share/common-licenses", "/usr/share/perl5",
    "/usr/share/ca-certificates", "/etc/ssl/certs", "/lib/terminfo",
]


def populate_hostfiles(root):
    root = Path(root)
    paths = list(HOST_PATHS)
    paths += [str(p) for p in sorted(Path("/usr/lib").glob("*-linux-gnu/libz.so*"))]
    copied = 0
    for src in paths:
        src = Path(src)
        if not os.path.lexists(src):
            log(f"hostfiles: {src} not on this host, skipped")
            continue
        dst = root / src.relative_to("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)
        copied += 1
    # the parent dirs made above must not be 0700 or similar
    for p in [root, *root.rglob("*")]:
        if p.is_dir() and not p.is_symlink() and p.name not in ("tmp", "root"):
            os.chmod(p, 0o755)
    nfiles = sum(1 for _ in root.rglob("*"))
    log(f"hostfiles: {copied} host paths, {nfiles} entries in rootfs")


def umoci_layers():
    """Return raw tars (base, whiteouts, hostfiles) made by umoci repack."""
    lay = WORK / "umoci"
    run("umoci", "init", "--layout", lay)

    # Layer 1: busybox base.
    run("umoci", "new", "--image", f"{lay}:base")
    run("umoci", "unpack", "--image", f"{lay}:base", WORK / "b-base")
    populate_base(WORK / "b-base/rootfs")
    run("umoci", "repack", "--image", f"{lay}:base", WORK / "b-base")

    # Layer 2: delete a file and a directory, so umoci writes whiteouts.
    run("umoci", "unpack", "--image", f"{lay}:base", WORK / "b-wh")
    r = WORK / "b-wh/rootfs"
    (r / "etc/motd").unlink()
    shutil.rmtree(r / "usr/share/removeme")
    (r / "layer2.txt").write_text("added in layer 2\n")
    run("umoci", "repack", "--image", f"{lay}:wh", WORK / "b-wh")

    # hostfiles: a single layer with busybox base + host files.
    run("umoci", "new", "--image", f"{lay}:host")
    run("umoci", "unpack", "--image", f"{lay}:host", WORK / "b-host")
    populate_base(WORK / "b-host/rootfs")
    (WORK / "b-host/rootfs/etc/motd").unlink()
    shutil.rmtree(WORK / "b-host/rootfs/usr/share/removeme")
    populate_hostfiles(WORK / "b-host/rootfs")
    run("umoci", "repack", "--image", f"{lay}:host", WORK / "b-host")

    base, wh = layer_tars(lay, "wh")
    (host,) = layer_tars(lay, "host")
    names = raw_entry_names(wh)
    assert any(n.endswith(".wh.motd") for n in names), names
    assert any(n.endswith(".wh.removeme") for n in names), names
    return base, wh, host


# --------------------------------------------------------------------------
# The `layers` image: hand-crafted layers 3 and 4
# --------------------------------------------------------------------------

LONG_DIR = "long/" + "d" * 70                     # 75 chars
LONG_FILE = LONG_DIR + "/" + "n" * 120 + ".txt"   # 200 chars, PAX path
GNU_LONG_FILE = "gnulong/" + "g" * 110 + ".txt"   # 122 chars, GNU 'L' header
DEVICE = "special/chardev"


def features_layer():
    """Layer 3 (uncompressed, PAX): lots of entry kinds on top of the base."""
    t = TarBuilder(tarfile.PAX_FORMAT)
    # a directory with several files, made opaque by layer 4
    t.dir("opq/")
    for f in ("a", "b", "c"):
        t.file(f"opq/{f}", f"opq/{f} from layer 3\n".encode())
    t.dir("opq/sub/")
    t.file("opq/sub/d", b"opq/sub/d from layer 3\n")
    # owners and modes
    t.dir("data/")
    t.file("data/owned.txt", b"owned by 1000:1000\n", mode=0o640, uid=1000, gid=1000)
    t.file("data/suid", b"#!/bin/sh\necho suid\n", mode=0o4755)
    t.file("data/empty", b"")
    # links
    t.dir("links/")
    t.file("links/orig", b"hardlink content\n")
    t.hardlink("links/hard", "links/orig")
    t.symlink("links/rel", "orig")
    t.symlink("links/abs", "/links/orig")
    t.symlink("links/dirlink", "../data")
    t.symlink("links/absdirlink", "/data")
    t.symlink("links/dangling", "/nonexistent/target")
    # special files
    t.dir("special/")
    t.fifo("special/fifo")
    t.chardev(DEVICE, 1, 3)
    # deep path, parent directories NOT listed as entries
    t.file("deep/a/b/c/d/e/file.txt", b"deep file\n")
    # name longer than 100 chars (PAX path record)
    t.dir(LONG_DIR + "/")
    t.file(LONG_FILE, b"long name\n")
    # lower versions of things layer 4 replaces
    t.dir("replace/")
    t.file("replace/file2dir", b"was a file in layer 3\n")
    t.dir("replace/dir2file/")
    t.file("replace/dir2file/inner", b"inner, gone after layer 4\n")
    t.dir("over/")
    t.file("over/old", b"old content\n")
    t.hardlink("over/oldlink", "over/old")
    return t.bytes()


def upper_layer():
    """Layer 4 (zstd in the published image, GNU format)."""
    t = TarBuilder(tarfile.GNU_FORMAT)
    # opaque directory: lower opq/{a,b,c,sub/d} disappear
    t.dir("opq/")
    t.file("opq/.wh..wh..opq", b"")
    t.file("opq/new", b"opq/new from layer 4\n")
    # file -> directory, directory -> file (no explicit whiteouts)
    t.dir("replace/file2dir/")
    t.file("replace/file2dir/inside", b"now a directory\n")
    t.file("replace/dir2file", b"now a file\n")
    # overwrite a file whose old inode is also reachable as over/oldlink
    t.file("over/old", b"new content\n")
    # a hard link to a file of a lower layer, and a pair within this layer
    t.hardlink("links/hard-later", "links/orig")
    t.file("links/later-a", b"later pair\n")
    t.hardlink("links/later-b", "links/later-a")
    # long name again, GNU ././@LongLink style
    t.dir("gnulong/")
    t.file(GNU_LONG_FILE, b"gnu long name\n")
    return t.bytes()


LAYERS_CONFIG = {
    "Env": [PATH_ENV, "FOO=bar"],
    "Entrypoint": ["/bin/echo", "berth-entrypoint"],
    "Cmd": ["default-cmd"],
    "WorkingDir": "/work",
    "User": "1000:1000",
    "Labels": {"org.opencontainers.image.title": "berth-test-layers",
               "org.berth.test": "layers"},
}


# --------------------------------------------------------------------------
# Malicious layers
# --------------------------------------------------------------------------

ESCAPE = b"escaped!\n"


def evil_images():
    """NAME -> (list of raw evil layer tars, offending entry name)."""
    def one(build):
        t = TarBuilder()
        build(t)
        return t.bytes()

    ev = {}
    ev["evil-dotdot"] = ([one(lambda t: t.file("../escape", ESCAPE))], "../escape")
    ev["evil-dotdot-mid"] = ([one(lambda t: t.file("a/../../escape", ESCAPE))],
                             "a/../../escape")
    # A leading "/" is dropped, as tar and every engine do ("/x" is "x"
    # inside the root); climbing above the root from there is the attack.
    ev["evil-absolute"] = ([one(lambda t: t.file("/../abs-escape", ESCAPE))],
                           "/../abs-escape")

    # Symlinked parents are followed inside the root (an absolute target
    # starts again at the root); a target that climbs above it is refused.
    def sym_parent(t):
        t.symlink("lnk", "../../../tmp")
        t.file("lnk/escape", ESCAPE)
    ev["evil-symlink-parent"] = ([one(sym_parent)], "lnk/escape")

    ev["evil-symlink-parent-lower"] = (
        [one(lambda t: t.symlink("lnk2", "/usr/../../tmp")),
         one(lambda t: t.file("lnk2/escape", ESCAPE))], "lnk2/escape")
    ev["evil-hardlink-out"] = (
        [one(lambda t: t.hardlink("h", "../../etc/passwd"))], "h")
    ev["evil-hardlink-abs"] = (
        [one(lambda t: t.hardlink("h", "/../etc/passwd"))], "h")

    def hl_sym(t):
        t.symlink("s", "/etc")
        t.hardlink("h", "s/passwd")
    ev["evil-hardlink-symlink"] = ([one(hl_sym)], "h")

    # tarfile must not have rewritten any name
    for name, (tars, entry) in ev.items():
        assert entry in raw_entry_names(tars[-1]), (name, raw_entry_names(tars[-1]))
    return ev


# --------------------------------------------------------------------------
# Oracle and self-checks
# --------------------------------------------------------------------------

def make_oracle(oracle_layout, tag, dest):
    bundle = WORK / f"oracle-{tag}"
    run("umoci", "unpack", "--image", f"{oracle_layout}:{tag}", bundle)
    os.rename(bundle / "rootfs", dest)
    shutil.rmtree(bundle)


def check_layers_oracle(root):
    """Make sure umoci's idea of the `layers` image is what the tests expect."""
    r = Path(root)

    def rd(p):
        return (r / p).read_bytes()

    assert not (r / "etc/motd").exists()
    assert not (r / "usr/share/removeme").exists()
    assert sorted(os.listdir(r / "opq")) == ["new"], os.listdir(r / "opq")
    assert (r / "replace/file2dir").is_dir()
    assert rd("replace/file2dir/inside") == b"now a directory\n"
    assert (r / "replace/dir2file").is_file()
    assert rd("over/old") == b"new content\n"
    assert rd("over/oldlink") == b"old content\n"
    st = os.lstat(r / "links/orig")
    assert st.st_nlink == 3, st
    assert os.lstat(r / "links/hard").st_ino == st.st_ino
    assert os.lstat(r / "links/hard-later").st_ino == st.st_ino
    assert os.lstat(r / "links/later-b").st_ino == os.lstat(r / "links/later-a").st_ino
    st = os.lstat(r / "data/owned.txt")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1000, 1000, 0o640)
    assert os.lstat(r / "data/suid").st_mode & 0o7777 == 0o4755
    assert os.lstat(r / "tmp").st_mode & 0o7777 == 0o1777
    assert (r / LONG_FILE).is_file() and (r / GNU_LONG_FILE).is_file()
    assert rd("deep/a/b/c/d/e/file.txt") == b"deep file\n"
    assert os.readlink(r / "links/abs") == "/links/orig"
    assert not list(r.rglob(".wh.*"))


# --------------------------------------------------------------------------

def main():
    if os.geteuid() != 0:
        raise SystemExit("make_images: must run as root")
    os.umask(0o022)
    for d in (FIX, WORK):
        if d.exists():
            shutil.rmtree(d)
    WORK.mkdir(parents=True)
    (FIX / "oci").mkdir(parents=True)
    (FIX / "oracle").mkdir()

    # Layouts under WORK that only umoci reads to make the oracles: every
    # good image again, amd64 only, every layer gzip (umoci 0.4.7 cannot
    # read zstd); the uncompressed layer tars are the same.
    oracle_src = Layout(WORK / "oracle-src")

    log("building base layers with umoci")
    base_raw, wh_raw, host_raw = umoci_layers()
    base = Layer(base_raw, "gzip", "umoci repack: busybox base")
    wh = Layer(wh_raw, "gzip", "umoci repack: rm /etc/motd /usr/share/removeme")

    def publish(name, layers, config):
        lay = Layout(FIX / "oci" / name)
        lay.tag("latest", write_image(lay, layers, config))
        return lay

    # a. layers
    log("image: layers")
    layers = [base, wh,
              Layer(features_layer(), "none", "hand-crafted: features"),
              Layer(upper_layer(), "zstd", "hand-crafted: upper")]
    publish("layers", layers, LAYERS_CONFIG)
    oracle_src.tag("layers", write_image(oracle_src, layers, LAYERS_CONFIG,
                                         force_comp="gzip"))
    (FIX / "dropped-devices.txt").write_text(f"layers\t{DEVICE}\n")

    # b. multiarch
    log("image: multiarch")
    lay = Layout(FIX / "oci" / "multiarch")
    descs = []
    for arch, variant in (("amd64", None), ("arm64", None), ("arm", "v7")):
        plat = "linux/" + arch + (f"/{variant}" if variant else "")
        t = TarBuilder()
        t.file("platform", (plat + "\n").encode())
        plat_layers = [Layer(t.bytes(), "gzip", f"platform file {plat}")]
        cfg = {"Env": [PATH_ENV], "Labels": {"org.berth.test.platform": plat}}
        descs.append(write_image(lay, plat_layers, cfg, (arch, "linux", variant)))
        if arch == "amd64":
            oracle_src.tag("multiarch", write_image(oracle_src, plat_layers, cfg))
    lay.tag("latest", lay.put(jdump({"schemaVersion": 2, "mediaType": MT_INDEX,
                                     "manifests": descs}), MT_INDEX))

    # c. hostfiles
    log("image: hostfiles")
    host = [Layer(host_raw, "gzip", "umoci repack: busybox + host files")]
    host_cfg = {"Env": [PATH_ENV], "Cmd": ["/bin/sh"],
                "Labels": {"org.berth.test": "hostfiles"}}
    publish("hostfiles", host, host_cfg)
    oracle_src.tag("hostfiles", write_image(oracle_src, host, host_cfg))

    # d. docker-v2s2: OCI source here; setup.sh pushes it with --format v2s2
    log("image: docker-v2s2")
    v2_cfg = {"Env": [PATH_ENV, "FOO=bar"], "Cmd": ["/bin/sh"],
              "WorkingDir": "/work", "Labels": {"org.berth.test": "docker-v2s2"}}
    publish("docker-v2s2", [base, wh], v2_cfg)
    oracle_src.tag("docker-v2s2", write_image(oracle_src, [base, wh], v2_cfg))

    good = ["layers", "multiarch", "hostfiles", "docker-v2s2"]
    (FIX / "images.txt").write_text("".join(n + "\n" for n in good))

    # Malicious images
    log("images: evil-*")
    evil_cfg = {"Env": [PATH_ENV], "Cmd": ["/bin/sh"]}
    lines = []
    for name, (tars, entry) in evil_images().items():
        ls = [base] + [Layer(t, "gzip", f"{name} layer") for t in tars]
        publish(name, ls, evil_cfg)
        lines.append(f"{name}\t{entry}\n")
    (FIX / "evil.txt").write_text("".join(lines))

    # Oracles
    for name in good:
        log(f"oracle: {name}")
        make_oracle(WORK / "oracle-src", name, FIX / "oracle" / name)
    check_layers_oracle(FIX / "oracle" / "layers")

    # Archives of `layers` for the import tests
    log("archives: layers.oci-archive.tar, layers.docker-archive.tar")
    src = f"oci:{FIX}/oci/layers:latest"
    run("skopeo", "--insecure-policy", "copy", "--quiet", "--preserve-digests",
        src, f"oci-archive:{FIX}/layers.oci-archive.tar:latest")
    # Docker archives cannot hold zstd layers (skopeo refuses the manifest
    # conversion), so the docker archive is made from the gzip variant.
    # docker-archive: stores layers uncompressed anyway, so its layer tars
    # and diff_ids are exactly those of the published image.
    run("skopeo", "--insecure-policy", "copy", "--quiet",
        f"oci:{WORK}/oracle-src:layers",
        f"docker-archive:{FIX}/layers.docker-archive.tar:berth-test/layers:latest")

    shutil.rmtree(WORK)
    for p in [FIX, *FIX.rglob("*")]:
        # oracle trees keep umoci's modes; everything else world-readable
        if "oracle" not in p.relative_to(FIX).parts[:1] and not p.is_symlink():
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.chmod(FIX / "oracle", 0o755)
    log(f"done: {FIX}")


if __name__ == "__main__":
    main()
