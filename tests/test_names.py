from cellica.core.names import safe_filename

HOSTILE = ["index", "INDEX", "../../x", ".hidden", "a/b", "a_b", "TP53", "tp53", "x" * 300, "..", "", "a b",
           "<script>", "genes", "index.html"]


def test_names_keep_their_text_and_always_carry_a_hash():
    assert safe_filename("TP53") == "TP53-455933aa"
    assert safe_filename("../etc/passwd") == "etc_passwd-e96c47ea"


def test_hostile_names_never_collide_hide_or_take_a_reserved_page():
    names = [safe_filename(n) for n in HOSTILE]
    assert len(set(names)) == len(HOSTILE)
    # Case-insensitive file systems: still distinct after lower-casing.
    assert len({n.lower() for n in names}) == len(HOSTILE)
    for name in names:
        assert "/" not in name and not name.startswith(".") and "<" not in name and " " not in name
        assert name not in ("index", "genes") and len(name) <= 89  # 80 + "-" + 8 hex
    # Cleaning a cleaned name gives a new name: crafted names cannot imitate another's file.
    assert safe_filename(safe_filename("a/b")) != safe_filename("a/b")
