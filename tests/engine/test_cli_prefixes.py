"""A long option's prefix is an error, never another option.

`--base-model X` once silently set another option; with prefixes accepted, `--base`
would be `--base-model` for the editing benchmark today and ambiguous once
`--adapter-base` exists, and adding any option could change what an old command meant.
"""

import pytest

from evaldag.engine import cli


@pytest.mark.parametrize("bench, prefix", [("editing", "--base"), ("tofu", "--adapter"), ("tofu", "--retain-mod"),
                                            ("tofu", "--batch-tok")])
def test_a_prefix_of_an_option_is_an_error_naming_it(bench, prefix, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["run", bench, prefix, str(tmp_path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith("evaldag: error: unrecognized arguments: ") and prefix in err, err
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_other_commands_refuse_prefixes_too(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:  # `cache` of `--cache-dir`
        cli.main(["cache", "info", "--cache", str(tmp_path)])
    assert e.value.code == 2 and "unrecognized arguments: --cache" in capsys.readouterr().err
