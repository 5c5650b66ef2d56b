"""Pack a folder as a one-layer image in the docker-archive format.

Usage: python3 image.py <folder> <name:tag> <entrypoint as JSON> <out.tar>

The tests' cluster takes its images from no registry: `ctr images import`
reads this archive (a layer tarball, a config whose rootfs.diff_ids names
the layer by its sha256, and manifest.json tying the two to the tag).
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile


def main() -> None:
    folder, tag, entrypoint, out = sys.argv[1:5]
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out))) as work:
        layer = os.path.join(work, "layer.tar")
        subprocess.run(["tar", "-C", folder, "--numeric-owner", "-cf", layer, "."], check=True)
        digest = hashlib.sha256()
        with open(layer, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": json.loads(entrypoint), "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + digest.hexdigest()]},
            "history": [{"created_by": "mu tests/cluster/image.py"}],
        }
        with open(os.path.join(work, "config.json"), "w") as f:
            json.dump(config, f)
        with open(os.path.join(work, "manifest.json"), "w") as f:
            json.dump([{"Config": "config.json", "RepoTags": [tag], "Layers": ["layer.tar"]}], f)
        subprocess.run(["tar", "-C", work, "-cf", out + ".part", "config.json", "manifest.json", "layer.tar"], check=True)
        os.replace(out + ".part", out)


if __name__ == "__main__":
    main()
