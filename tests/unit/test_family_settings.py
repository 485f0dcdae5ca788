"""A family owns its settings: each `policy.<section>` is validated by the model its family
declares in the registry, `policy.kind` names the kinds the registry knows, and the spellings
of before (`policy.planner`, `policy.target`, `policy.tokenizer`, ...) are still read and said
to be old."""

from __future__ import annotations

import logging

import pytest

from controller.config import TempoConfig, dump_config, load_config
from controller.errors import ConfigError
from controller.policy_sections import PolicyConfig
from policies.flow.settings import RTCConfig
from policies.pi0.settings import PromptSettings
from policies.reach.settings import ReachSettings
from policies.tdmpc2.settings import PlannerSettings


def config_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(None, list(overrides))
    return str(info.value)


def test_each_section_is_its_familys_model_at_its_defaults():
    policy = TempoConfig().policy
    assert type(policy.section("rtc")) is RTCConfig
    assert type(policy.section("tdmpc2")) is PlannerSettings
    assert type(policy.section("reach")) is ReachSettings
    assert type(policy.section("prompt")) is PromptSettings
    assert policy.section("tdmpc2") == PlannerSettings()


def test_a_bad_field_of_a_family_section_is_named_where_it_is():
    assert "--set: policy.rtc.beta: Input should be greater than 0" in config_error(
        "policy.rtc.beta=-1"
    )
    message = config_error("policy.reach.colour=red")
    assert "policy.reach.colour: unknown field" in message
    assert "policy.tdmpc2: fallback_k (30) must be at most fallback_n (20)" in config_error(
        "policy.tdmpc2.fallback_k=30"
    )
    # In a named policy of `policies:`, the place says which one.
    message = config_error("policies=[{name: a, policy: {reach: {chunk_size: 0}}}]")
    assert "policies.0.policy.reach.chunk_size: Input should be greater than or equal to 1" in (
        message
    )


def test_the_sections_field_is_no_spelling_of_the_config():
    assert "policy.sections: unknown field" in config_error("policy.sections={}")


@pytest.mark.parametrize(
    ("old", "new", "section"),
    [
        ("policy.planner.mode=prior", "policy.tdmpc2.mode=prior", "tdmpc2"),
        ("policy.target=[0.1, 0.2]", "policy.reach.target=[0.1, 0.2]", "reach"),
        ("policy.chunk_size=7", "policy.reach.chunk_size=7", "reach"),
        ("policy.default_task=wave", "policy.prompt.default_task=wave", "prompt"),
        ("policy.tokenizer=/t.model", "policy.prompt.tokenizer=/t.model", "prompt"),
    ],
)
def test_an_old_spelling_is_read_as_the_new_and_said_to_be_old(
    old, new, section, caplog, monkeypatch
):
    from controller import policy_sections

    monkeypatch.setattr(policy_sections, "_said_old", set())
    with caplog.at_level(logging.WARNING, logger="controller.policy_sections"):
        read = load_config(None, [old]).policy.section(section)
    said = f"{old.partition('=')[0].removesuffix('.mode')} is the old spelling"
    assert said in caplog.text
    assert read == load_config(None, [new]).policy.section(section)
    assert read != PolicyConfig().section(section)


def test_an_old_spelling_is_said_once_per_process(caplog, monkeypatch):
    from controller import policy_sections

    monkeypatch.setattr(policy_sections, "_said_old", set())
    with caplog.at_level(logging.WARNING, logger="controller.policy_sections"):
        load_config(None, ["policy.target=[1]"])
        load_config(None, ["policy.target=[2]"])
    assert caplog.text.count("policy.target is the old spelling") == 1


def test_the_old_and_the_new_spelling_both_set_are_refused():
    assert "set policy.tdmpc2 or its old spelling policy.planner, not both" in config_error(
        "policy.planner.mode=prior", "policy.tdmpc2.mode=plan"
    )
    assert "set policy.reach.target or its old spelling policy.target, not both" in config_error(
        "policy.target=[1]", "policy.reach.target=[2]"
    )


def test_a_dumped_config_is_written_in_the_new_spelling_and_reads_back(tmp_path):
    config = load_config(None, ["policy.planner.mode=prior", "policy.tokenizer=/t.model"])
    text = dump_config(config)
    assert "planner:" not in text and "  tdmpc2:\n    mode: prior" in text
    assert "  prompt:\n    tokenizer: /t.model" in text
    path = tmp_path / "tempo.yaml"
    path.write_text(text)
    assert load_config(path) == config


def test_policy_kind_comes_from_the_registry():
    message = config_error("policy.kind=magic")
    assert "policy.kind: 'magic' is not a kind of policy; known: 'checkpoint', 'reach'" in message
    # A family that builds no policy from the config (its policies are checkpoints) is no kind.
    assert "'act' is not a kind of policy" in config_error("policy.kind=act")


def test_two_families_declaring_one_section_with_different_models_is_refused():
    """Families share a section by naming one model (flow, pi0 and pi0.5 share policy.rtc);
    two different models for one name is the families' mistake, said when a config is read."""
    from policies.registry import FamilySettings, PolicyFamily, register, unregister
    from policies.section_model import FamilySection

    class One(FamilySection):
        a: int = 1

    class Other(FamilySection):
        b: int = 2

    for name, model in (("twin-a", One), ("twin-b", Other)):
        section = FamilySettings(section="twin", model=lambda model=model: model)
        register(PolicyFamily(name=name, title=name, summary="a twin", settings=(section,)))
    try:
        with pytest.raises(TypeError, match="policy.twin is declared by two families"):
            load_config(None, ["policy.kind=reach"])
        unregister("twin-b")
        assert load_config(None, ["policy.twin.a=3"]).policy.section("twin") == One(a=3)
        # A config made before the family was registered (the default one) has it at its
        # defaults.
        assert TempoConfig().policy.section("twin") == One()
        with pytest.raises(KeyError, match="policy.nothing is no registered family's section"):
            TempoConfig().policy.section("nothing")
    finally:
        unregister("twin-a")
        unregister("twin-b")
