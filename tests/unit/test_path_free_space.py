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


def test_a_model_already_in_place_counts_as_room(tmp_path):
    """A host that holds the ~600 GB model must not need another 700 GB free for it on every rerun."""
    model = tmp_path / "models" / "kimi"
    model.mkdir(parents=True)
    (model / "model-00001-of-00002.safetensors").write_bytes(b"\0" * (3 << 20))
    (model / "config.json").write_text("{}")
    (model / "link").symlink_to("/usr")  # not followed
    bare = path_free_space.measure(str(tmp_path / "models"))
    counted = path_free_space.measure(str(tmp_path / "models"), [str(model), str(tmp_path / "absent")])
    assert bare["present_bytes"] == 0 and bare["room_gb"] == bare["free_gb"]
    assert 3 << 20 <= counted["present_bytes"] < 4 << 20
    assert counted["room_gb"] == round((counted["free_bytes"] + counted["present_bytes"]) / 1e9, 1)
