"""A benchmark config takes a template the way the command line spells it."""

import pytest
from pydantic import ValidationError

from evaldag.benchmarks.tofu.config import TofuConfig
from evaldag.engine.adapters.base import PromptTemplate


def test_template_words_as_the_flag_takes_them():
    assert TofuConfig(template="chat").template == PromptTemplate.chat()
    assert TofuConfig(template="plain").template == PromptTemplate.plain()
    assert TofuConfig(template=PromptTemplate.chat(system_prompt="s")).template.system_prompt == "s"


def test_template_args_file(tmp_path):
    f = tmp_path / "model.yaml"
    f.write_text("template_args:\n  apply_chat_template: false\n  user_start_tag: 'Q: '\n  asst_start_tag: 'A: '\n")
    t = TofuConfig(template=str(f)).template
    assert (t.user_start_tag, t.asst_start_tag, t.apply_chat_template) == ("Q: ", "A: ", False)


def test_unknown_template_word_says_what_is_taken():
    with pytest.raises(ValidationError, match="give 'plain', 'chat', an open-unlearning template_args file"):
        TofuConfig(template="chatml")
