#!/usr/bin/env python3
"""Writes a many-layer image as an OCI layout (bench/layers.sh; the layer
cache tests make one big layer with it).

  many_layers.py LAYOUT LAYERS MIB

Two tags, as a new release of an NGC image relates to the old one:
  v1  LAYERS layers: a small base (a few directories and files), then
      LAYERS-1 layers of MIB MiB of incompressible data each (one file)
  v2  the same layers but the last, which is new

Layers are gzip (level 1: the data does not compress anyway), the config
lists their diff_ids; blobs are written under their sha256.
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def put(layout, data):
    digest = sha(data)
    path = os.path.join(layout, "blobs", "sha256", digest[7:])
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(data)
    return digest


def tar_of(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in files:
            if data is None:
                info = tarfile.TarInfo(name)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                t.addfile(info)
            else:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def layer(layout, files):
    raw = tar_of(files)
    blob = gzip.compress(raw, compresslevel=1, mtime=0)
    return {"digest": put(layout, blob), "size": len(blob), "diff_id": sha(raw)}


def image(layout, layers):
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": [lay["diff_id"] for lay in layers]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": put(layout, config), "size": len(config)},
        "layers": [{"mediaType": MT_LAYER, "digest": lay["digest"], "size": lay["size"]}
                   for lay in layers],
    }, sort_keys=True).encode()
    return {"mediaType": MT_MANIFEST, "digest": put(layout, manifest), "size": len(manifest)}


def main():
    layout, count, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(os.path.join(layout, "blobs", "sha256"), exist_ok=True)
    base = layer(layout, [("etc", None), ("etc/os-release", b"NAME=bench\n"),
                          ("data", None), ("bin", None)])
    data = [layer(layout, [(f"data/layer-{n}.bin", os.urandom(mib << 20))])
            for n in range(1, count)]
    new = layer(layout, [(f"data/layer-{count - 1}.bin", os.urandom(mib << 20))])
    tags = {"v1": image(layout, [base] + data), "v2": image(layout, [base] + data[:-1] + [new])}
    index = {"schemaVersion": 2, "manifests": [
        dict(desc, annotations={"org.opencontainers.image.ref.name": tag})
        for tag, desc in tags.items()]}
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)


if __name__ == "__main__":
    main()
