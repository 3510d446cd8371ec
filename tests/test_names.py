from cellica.names import safe_filename


def test_safe_names_pass_through():
    assert safe_filename("TP53") == "TP53"
    assert safe_filename("GENE-1.a_b") == "GENE-1.a_b"


def test_unsafe_names_are_cleaned_and_stay_distinct():
    cleaned = {safe_filename(n) for n in ["../etc/passwd", "a/b", "a_b/", "<script>", "..", "", "a b"]}
    assert len(cleaned) == 7
    for name in cleaned:
        assert "/" not in name and not name.startswith(".") and "<" not in name and " " not in name
    assert safe_filename("../etc/passwd") == "etc_passwd-e96c47ea"
