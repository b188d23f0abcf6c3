"""The monitoring stage's basic auth: a bcrypt hash every run writes the same for one host and user (so a
second run changes nothing and --check --diff tells the truth), that verifies the password and no other,
with a salt that says nothing of the password; and the settings refused before any change."""
import bcrypt
import pytest
from ansible.errors import AnsibleFilterError

from fleet_monitoring_web import _salt, fleet_monitoring_web_hash, fleet_monitoring_web_problems

PASSWORD = "lab-monitoring-secret-5b2e"


def test_the_hash_is_bcrypt_and_verifies_the_password_only():
    hashed = fleet_monitoring_web_hash(PASSWORD, "mon-1", "fleet")
    assert hashed.startswith("$2b$10$") and len(hashed) == 60
    assert bcrypt.checkpw(PASSWORD.encode(), hashed.encode())
    assert not bcrypt.checkpw(b"lab-monitoring-secret-5b2f", hashed.encode())
    assert PASSWORD not in hashed


def test_one_host_and_user_get_the_same_hash_on_every_run():
    assert fleet_monitoring_web_hash(PASSWORD, "mon-1", "fleet") == fleet_monitoring_web_hash(PASSWORD, "mon-1", "fleet")


def test_each_host_and_user_has_its_own_salt_and_a_new_password_a_new_hash():
    hashes = {fleet_monitoring_web_hash(PASSWORD, host, user)
              for host in ("mon-1", "gpu-1") for user in ("fleet", "scraper")}
    assert len(hashes) == 4 and len({h[7:29] for h in hashes}) == 4
    assert fleet_monitoring_web_hash("another-password", "mon-1", "fleet") != fleet_monitoring_web_hash(
        PASSWORD, "mon-1", "fleet")
    # "host\0user" leaves no two pairs one string: ("a", "b:c") is not ("a:b", "c")
    assert _salt("a", "bc") != _salt("ab", "c")


def test_the_salt_does_not_depend_on_the_password():
    """A salt computed quickly from the password would let whoever reads the file test guesses at HMAC
    speed, past bcrypt's cost."""
    assert fleet_monitoring_web_hash(PASSWORD, "mon-1", "fleet")[:29] == fleet_monitoring_web_hash(
        "another-password", "mon-1", "fleet")[:29]


def test_the_salt_is_bcrypt_s_canonical_22_characters():
    salt = _salt("mon-1", "fleet")
    assert len(salt) == 22 and set(salt) <= set("./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
    # the 22nd character carries 2 bits of the 128: the rest zero, as bcrypt itself writes it back
    assert fleet_monitoring_web_hash(PASSWORD, "mon-1", "fleet")[7:29] == salt


def test_the_cost_is_the_one_asked():
    assert fleet_monitoring_web_hash(PASSWORD, "mon-1", "fleet", rounds=4).startswith("$2b$04$")


@pytest.mark.parametrize("password, user, cert, key, says", [
    ("", "fleet", "", "", "fleet_monitoring_web_password is empty"),
    (None, "fleet", "", "", "fleet_monitoring_web_password is empty"),
    (" padded ", "fleet", "", "", "whitespace"),
    ("x" * 73, "fleet", "", "", "72 bytes"),
    (PASSWORD, "", "", "", "fleet_monitoring_web_user"),
    (PASSWORD, "a:b", "", "", "fleet_monitoring_web_user"),
    (PASSWORD, "fleet", "/etc/ssl/mon.pem", "", "go together"),
    (PASSWORD, "fleet", "", "/etc/ssl/mon.key", "go together"),
])
def test_bad_settings_are_named(password, user, cert, key, says):
    problems = fleet_monitoring_web_problems(password, user, cert, key)
    assert len(problems) == 1 and says in problems[0], problems
    assert PASSWORD not in problems[0]


def test_good_settings_have_no_problem():
    assert fleet_monitoring_web_problems(PASSWORD, "fleet") == []
    assert fleet_monitoring_web_problems(PASSWORD, "fleet", "/etc/ssl/mon.pem", "/etc/ssl/mon.key") == []


def test_the_filter_refuses_an_empty_password_without_saying_it():
    with pytest.raises(AnsibleFilterError, match="fleet_monitoring_web_password is empty"):
        fleet_monitoring_web_hash("", "mon-1", "fleet")
    with pytest.raises(AnsibleFilterError) as failed:
        fleet_monitoring_web_hash(" %s " % PASSWORD, "mon-1", "fleet")
    assert PASSWORD not in str(failed.value)
