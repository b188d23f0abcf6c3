# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Installed package versions read from a site-packages directory, without importing anything."""
from __future__ import annotations

import glob
import os


def dist_version(site_packages, project):
    """The Version: of project's *.dist-info/METADATA under site_packages, or "unknown"."""
    pattern = os.path.join(site_packages, "%s-*.dist-info" % project.replace("-", "_"))
    for meta in sorted(glob.glob(pattern)):
        try:
            with open(os.path.join(meta, "METADATA")) as handle:
                for line in handle:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            continue
    return "unknown"
