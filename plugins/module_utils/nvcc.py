# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What `nvcc --version` says."""
from __future__ import annotations

import re

RELEASE = re.compile(r"Cuda compilation tools, release (\d+\.\d+), V(\d+\.\d+\.\d+)")


def parse_nvcc(text):
    """(release, full version) from `nvcc --version`, or (None, None)."""
    match = RELEASE.search(text or "")
    return (match.group(1), match.group(2)) if match else (None, None)
