"""What a SLURM run needs from its user before the first submission: the account and partition
the slurm profile leaves as ``SET_ME`` (``workflow/profiles/slurm/config.yaml``; docs/hpc.md)."""

from __future__ import annotations


def missing_slurm_settings(jobs) -> str | None:
    """Why a SLURM run must stop before its first submission, or None.

    Parameters
    ----------
    jobs : iterable of (str, dict, bool)
        Each job to run: its rule's name, its resources, and whether it runs locally.

    The slurm profile leaves account and partition to the user (``SET_ME``); sbatch's
    own error would come only after the first jobs were queued.
    """
    missing: dict[str, set[str]] = {}
    for rule, resources, local in jobs:
        if local:
            continue
        for key in ("slurm_account", "slurm_partition"):
            value = resources.get(key)
            if value in (None, "", "SET_ME"):
                missing.setdefault(f"{key} (now {value or 'unset'})", set()).add(rule)
    if not missing:
        return None
    rules = sorted(set().union(*missing.values()))
    return (f"SLURM run stopped before submitting anything: set {' and '.join(sorted(missing))} under "
            "default-resources in workflow/profiles/slurm/config.yaml (or your copy of it), or per rule "
            f"under set-resources; rules that would be submitted: {', '.join(rules)}. See docs/hpc.md.")


def unset_profile_settings(default_resources: list[str] | None) -> str | None:
    """A warning for the dry run when the profile's default account or partition is still unset.

    Parameters
    ----------
    default_resources : list of str or None
        Snakemake's ``default-resources`` as ``key=value`` strings (``--default-resources``, or a
        profile's mapping).

    Returns
    -------
    str or None
        The line to show before anything is planned for submission, or None when both are set.
        The run itself stops at the first job that lacks them (:func:`missing_slurm_settings`).
    """
    values = dict(item.split("=", 1) for item in default_resources or [] if "=" in item)
    unset = [key for key in ("slurm_account", "slurm_partition") if values.get(key, "").strip("'\"") == "SET_ME"]
    if not unset:
        return None
    return (f"{' and '.join(unset)} still SET_ME under default-resources (workflow/profiles/slurm/config.yaml or your "
            "copy): a SLURM run will stop before submitting anything until they are set (docs/hpc.md)")
