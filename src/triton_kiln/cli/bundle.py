"""``kiln bundle save | show``: the tuned variants in the cache written to a bundle, and a bundle's
contents listed (docs/BUNDLES.md)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("bundle", short_help="Write and inspect bundles of tuned kernels.")
def bundle_group() -> None:
    """Write and inspect bundles of tuned kernels (binaries + launch metadata + tuning records)."""


@bundle_group.command("save", short_help="Write the tuned variants in the cache to a bundle.")
@click.argument("path", type=click.Path(dir_okay=True, file_okay=True))
@click.option("--kernel", default=None, help="Only this kernel (by name).")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="kiln cache holding the tuned variants (default: KILN_CACHE_DIR, else ~/.cache/kiln).",
)
def bundle_save(path: str, kernel: str | None, cache_dir: str | None) -> None:
    """Write every tuned variant recorded in the kiln cache to PATH (a directory, or .tar/.tar.gz/.tgz)."""
    import warnings

    from triton_kiln import settings
    from triton_kiln.bundle import BundleError, collect_recorded, write_bundle
    from triton_kiln.bundle.format import check_bundle_path
    from triton_kiln.files import check_writable, write_error

    check_bundle_path(Path(path))  # before anything is read or made
    check_writable(Path(path), f"the bundle {path}")
    root = Path(cache_dir) if cache_dir else settings.current().cache_dir
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            kernels, binaries = collect_recorded(root, kernel)
        except BundleError as exc:
            raise click.ClickException(str(exc)) from None
        try:
            written = write_bundle(Path(path), kernels, binaries)
        except BundleError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            raise write_error(f"the bundle {path}", Path(path), exc) from None
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    for record in kernels:
        click.echo(f"{record.name}: {len(record.entries)} variant(s)")
    click.echo(f"written: {written}")


@bundle_group.command("show", short_help="List a bundle's kernels and variants.")
@click.argument("path", type=click.Path(exists=True))
def bundle_show(path: str) -> None:
    """List a bundle's kernels and variants (no GPU needed)."""
    from triton_kiln.bundle import BundleReader

    reader = BundleReader(path)  # a BundleError becomes one "Error:" line (_KilnGroup)
    manifest = reader.manifest
    click.echo(f"{path}: kiln {manifest.kiln_version}, Triton {manifest.triton_version}, {manifest.created}")
    for record in manifest.kernels:
        click.echo(f"{record.name} ({record.kernel_hash[:12]})")
        for entry in record.entries:
            kwargs = entry.config.get("kwargs", {})
            click.echo(
                f"  key {entry.key_values}  config {kwargs} warps={entry.config.get('num_warps')} "
                f"stages={entry.config.get('num_stages')}  sm_{entry.metadata['target']['arch']}  "
                f"{entry.source}"
            )
