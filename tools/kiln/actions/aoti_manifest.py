"""AotiManifest: <name>.manifest.json of an inductor aoti_package, from its metadata.

    <name>.pt2 -> <name>.manifest.json   (PackageManifest, kiln.package_specs)

The inductor backend compiles the structure once and joins the weights after
(AotiJoin), so `weights.how` is "joined"; the facts of the package are its kiln.*
metadata, which AotiJoin wrote, copied here so that a cache hit shows them as a file
beside the package. Reads the archive with zipfile: no torch, so it costs a process
start. A separate action, not another output of AotiJoin, so that no key of a CPU
package's actions changes (AotiJoin's module is in their keys).
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

from kiln.actions import spec as action_spec
from kiln.actions.spec import ActionFailure
from kiln.package_specs import ManifestSpec, PackageManifest, PackageWeights

# AOTInductor's metadata record (<model>_metadata.json), as
# kiln.actions.constant_layout.METADATA_SUFFIX names it (that module imports torch).
METADATA_SUFFIX = "_metadata.json"


def main(spec: ManifestSpec) -> None:
    package = Path(spec.package)
    metadata = package_metadata(package)
    kiln = {k: v for k, v in sorted(metadata.items()) if k.startswith("kiln.")}
    if not kiln:
        raise ActionFailure(f"{package.name} has no kiln.* metadata (AotiJoin writes it)")
    form = kiln.get("kiln.weights_form", "packaged")
    where = "inside the .pt2" if form == "packaged" else f"in {kiln.get('kiln.weights_file')}"
    manifest = PackageManifest(
        label=spec.label,
        model=spec.model,
        package=package.name,
        backend="inductor",
        device=spec.device,
        weights=PackageWeights(
            how="joined",
            detail="the structure compiled once (AotiCompile), the weights joined after "
            f"(AotiJoin), {where}",
            sha256=kiln.get("kiln.weights_sha256") or None,
            form=form,
        ),
        engines=(),
        tensorrt=None,
        build_gpu=spec.build_gpu,
        metadata=kiln,
    )
    output = Path(spec.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(manifest.to_json(), encoding="utf-8")


def package_metadata(package: Path) -> dict[str, str]:
    """The AOTInductor metadata of a .pt2 (a zip archive), as get_metadata() gives it."""
    try:
        with zipfile.ZipFile(package) as archive:
            for name in archive.namelist():
                if name.endswith(METADATA_SUFFIX) and "/data/aotinductor/" in f"/{name}":
                    data = json.loads(archive.read(name))
                    return {str(k): str(v) for k, v in data.items()}
    except (OSError, zipfile.BadZipFile, ValueError) as error:
        raise ActionFailure(f"cannot read the metadata of {package.name}: {error}") from error
    return {}


if __name__ == "__main__":
    action_spec.run(main, ManifestSpec, sys.argv[1:], quiet=True)
