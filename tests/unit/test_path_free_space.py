import os

import path_free_space


def test_missing_directory_measures_its_closest_parent(tmp_path):
    result = path_free_space.measure(str(tmp_path / "models" / "kimi"))
    assert result["measured_path"] == str(tmp_path)
    st = os.statvfs(tmp_path)
    assert result["free_bytes"] == st.f_bavail * st.f_frsize
    assert result["free_gb"] == round(result["free_bytes"] / 1e9, 1)
    assert 0 < result["free_bytes"] <= result["total_bytes"]


def test_existing_path_is_measured_itself(tmp_path):
    assert path_free_space.measure(str(tmp_path))["measured_path"] == str(tmp_path)
