"""The risk rule pack as policy data (`[classes.<name>.risk_rules]`): facts, country lists, rules, thresholds.

Three layers, each data: a vocabulary (`facts`: how upstream systems name a fact, and the words that
mention it), lists (`country_lists`), and rules (`rules`: conditions over facts, the points a rule adds,
the public indicator it comes from). policies/risk_facts.py reads an event into facts, policies/risk.py
scores the rules; policies/risk_check.py checks the whole pack at load (every fact a rule names exists,
every condition parses, every country code is ISO 3166-1).
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from policies.schema import knob

CURRENCY_PATTERN = r"^[A-Z][A-Z0-9]{2,5}$"  # ISO 4217 (USD) or a crypto asset's ticker (USDT); RiskEvent.currency
_CURRENCY_RULE = "currency codes are capital letters: ISO 4217's three (USD) or a crypto ticker of up to six (USDT)"
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"  # facts, lists and rules are named in conditions
_NAME_RULE = "names are lower-case letters, digits and _ (they are written in rule conditions)"
WORD_PATTERN = r"^([tkv+#0n-]:[a-z0-9]{1,40}|f:[a-z][a-z0-9_]{0,63}|g:[a-z0-9_]{4})$"  # a marked word of the word model (policies/risk_words.py)
_WORD_RULE = "a mark (t k v + - # 0 n), a colon and a lower-case word (v:cash), or g: and a four-gram (g:_cas)"
# The word model's dense features (policies/risk_words.py): the rules' outcome and the event's shape
# (policies/risk_shape.py), beside the intercept and the amount; and the policy tables the fit writes.
PACK_FEATURES = ("rule_score", "strongest_rule", "rules_fired", "mitigations_held", "review_floor", "block_floor")
SHAPE_KEYS = ("ratio_up", "ratio_down")
MODEL_KEYS = ("intercept", "amount", *PACK_FEATURES, *SHAPE_KEYS)  # the keys of RiskRules.word_model
MODEL_TABLES = ("word_model", "word_weights", "review_model", "review_weights", "block_model", "block_weights")
MODEL_PATTERN = "^(" + "|".join(MODEL_KEYS) + ")$"
_MODEL_RULE = "intercept, amount, one of the rules' outcomes or the shape's ratios (MODEL_KEYS)"


class FactKind(str, enum.Enum):
    """How a fact's value is read (policies/risk_text.py)."""

    FLAG = "flag"  # true/false; also true when the event's words mention it, or a dated value is recent
    COUNT = "count"  # a count; its window is read from the attribute's name (transactions_24h)
    NUMBER = "number"  # an amount or a price, in the event's currency
    RATIO = "ratio"  # a share: 0.9, 90 or "90%"
    DEVIATION = "deviation"  # a signed relative difference: 0.6, 60 or "60%" (names with below/under: negative)
    DURATION = "duration"  # time elapsed, in `unit`: a number, "3 days", or a date before the event
    COUNTRY = "country"  # countries by ISO code or name
    TEXT = "text"  # a code kept as written (e.g. a currency)


class TimeUnit(str, enum.Enum):
    MINUTES = "minutes"
    HOURS = "hours"
    DAYS = "days"
    WEEKS = "weeks"
    MONTHS = "months"
    YEARS = "years"


class Combine(str, enum.Enum):
    """How the counted rules' points make one score (policies/risk.py RuleScore.points)."""

    SUM = "sum"  # added, capped at 100: two 30s make 60
    INDEPENDENT = "independent"  # as independent evidence, 100 x (1 - prod(1 - p/100)): two 30s make 51, never 100


class Action(str, enum.Enum):
    """A rule's floor on the verdict's recommended_action, least severe first."""

    APPROVE = "approve"
    REVIEW = "review"
    BLOCK = "block"


@dataclass(frozen=True, kw_only=True)
class RiskFact:
    """One fact of the vocabulary: its kind, the attribute names that carry it and the words that mention it."""

    kind: FactKind = field(metadata=knob("how the value is read: flag, count, number, ratio, deviation, duration, "
                                         "country or text"))
    names: tuple[str, ...] = field(default=(), metadata=knob(
        "attribute names that carry it, compared as bags of words (case, separators, word order, plurals, windows "
        "and units aside); '!name' reads a flag inverted, 'name:years' a number in that unit", optional=True))
    words: tuple[str, ...] = field(default=(), metadata=knob(
        "flags: phrases that, in any text of the event (type, values, names of true flags), make it true",
        optional=True))
    unit: TimeUnit = field(default=TimeUnit.DAYS, metadata=knob("durations: the unit of the value", optional=True))
    from_counts: bool = field(default=False, metadata=knob(
        "flags: also true when an attribute whose name mentions one of its words holds a positive number "
        "(hotel_nights_30d: 22 mentions hotel nights)", optional=True))
    per_day: bool = field(default=False, metadata=knob(
        "counts: scaled to a day by the window in the name (a week's 70 is 10; a window of an hour or less "
        "weighs short_window_weight); numbers: an amount per period (expected_monthly_turnover), scaled to a day, "
        "not read when the name says no period", optional=True))


@dataclass(frozen=True, kw_only=True)
class RiskCheck:
    """A control an upstream system reports the outcome of (a document check, a payee name check, 3-D Secure, a
    call-back): an attribute whose name names one of its `subjects`, read with its value's polarity
    (policies/risk_checks.py), makes `failed` or `passed` true."""

    subjects: tuple[str, ...] = field(metadata=knob(
        "phrases that name the control in an attribute's name, or in a text beside an outcome word"))
    failed: str = field(metadata=knob("the flag fact a failed outcome makes true"))
    passed: str = field(default="", metadata=knob("the flag fact a passed outcome makes true (empty: none)",
                                                  optional=True))
    pass_at: float = field(default=0.0, metadata=knob(
        "a score of the control (0-1, or 0-100 read as a percentage) below this fails (0: scores not read)",
        ge=0, le=1, optional=True))
    stated_passes: bool = field(default=False, metadata=knob(
        "a description given for the subject with no outcome word passes it (a source of funds stated, a "
        "document named)", optional=True))
    null_fails: bool = field(default=False, metadata=knob(
        "a null value fails it: a document, a registration or evidence given as null was not provided",
        optional=True))
    source: str = field(metadata=knob("the public guidance that names the control and what its failure means"))


@dataclass(frozen=True, kw_only=True)
class RiskRule:
    """A rule: when every `when` condition holds (and not every `unless` one), it adds `points`.

    A condition is `fact`, `not fact` or `fact OP number` (OP one of >= > <= < == !=), or several
    of those joined by `|` (any of them). Within a `group` only the rule with the most points counts.
    """

    when: tuple[str, ...] = field(metadata=knob("conditions that must all hold"))
    unless: tuple[str, ...] = field(default=(), metadata=knob(
        "conditions that, all holding, stop the rule (a benign look-alike)", optional=True))
    points: int = field(metadata=knob("points the rule adds to the score", ge=0, le=100))
    group: str = field(default="", metadata=knob(
        "rules of one group count once, the most points among those that fire (default: the rule alone)",
        optional=True))
    action: Action = field(default=Action.APPROVE, metadata=knob(
        "the least the recommended action may be when the rule fires (block: the level is high too)", optional=True))
    reason: str = field(metadata=knob("the phrase the verdict's reasons give (letters, spaces, , ' -; 3-36 long)"))
    source: str = field(metadata=knob("the public red-flag indicator or rule the rule comes from"))


@dataclass(frozen=True, kw_only=True)
class RiskMitigation:
    """Context an analyst uses to clear an alert (a benign look-alike): when its conditions hold, the rules it
    `offsets` keep only `keep` of their points. It never lowers a rule's action floor, and a rule whose floor is
    block (sanctions, fraud in progress) is never offset: no context clears those."""

    when: tuple[str, ...] = field(metadata=knob("conditions that must all hold (as a rule's)"))
    unless: tuple[str, ...] = field(default=(), metadata=knob(
        "conditions that, all holding, stop the mitigation (a counter-indicator)", optional=True))
    offsets: tuple[str, ...] = field(metadata=knob("the rules and rule groups whose points it lowers"))
    keep: float = field(default=0.0, metadata=knob(
        "the share of an offset rule's points that still counts (0: cleared)", ge=0, lt=1, optional=True))
    reason: str = field(metadata=knob("the phrase the verdict's reasons give (letters, spaces, , ' -; 3-36 long)"))
    source: str = field(metadata=knob("the public guidance that makes the context a lower-risk factor"))


@dataclass(frozen=True, kw_only=True)
class RiskRules:
    """Risk rules a class's verdicts are scored with (policies/risk.py; `finserve eval verdict --quality` times them).

    The score combines the fired rules' points (one per group, after mitigations; `combine`), plus at
    most `model_points` of the model's judgement, capped at 100; risk_level and recommended_action follow from it by the
    thresholds, raised to a fired rule's `action` floor, so the verdict depends neither on the order
    of the rules nor on that of the schema's enums. Disabled (the default): the model alone decides.
    """

    enabled: bool = field(default=False, metadata=knob("score verdicts with these rules (false: the model alone)"))
    facts: Mapping[str, RiskFact] = field(default_factory=dict, metadata=knob(
        "the vocabulary: fact name -> how events carry it", key_pattern=NAME_PATTERN, key_rule=_NAME_RULE))
    name_synonyms: Mapping[str, str] = field(default_factory=dict, metadata=knob(
        "a word of attribute names -> the word it stands for (txn -> transaction, acct -> account), applied to "
        "the vocabulary's names and the event's alike"))
    translations: Mapping[str, str] = field(default_factory=dict, metadata=knob(
        "a word of another language -> the English words it stands for (einzahlung -> deposit), applied to an "
        "event's attribute names and free text before the vocabulary reads them", optional=True))
    checks: Mapping[str, RiskCheck] = field(default_factory=dict, metadata=knob(
        "check name -> a control whose reported outcome makes a flag true (policies/risk_checks.py)",
        key_pattern=NAME_PATTERN, key_rule=_NAME_RULE, optional=True))
    failed_words: tuple[str, ...] = field(default=(), metadata=knob(
        "phrases saying a check failed (fail, no match, missing, unsigned, ...)", optional=True))
    passed_words: tuple[str, ...] = field(default=(), metadata=knob(
        "phrases saying a check passed (passed, match, verified, on file, ...); a negation before one fails it",
        optional=True))
    score_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of an attribute name saying it holds a score or rating (risk_score)", optional=True))
    score_subject_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of such a name saying it scores fraud or laundering risk (fraud, risk, aml, mule, device, ...)",
        optional=True))
    score_excluded_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of a score's name saying it is no event risk score: a customer's or country's rating, a match or "
        "liveness score (higher is better)", optional=True))
    rating_values: Mapping[str, float] = field(default_factory=dict, metadata=knob(
        "a rating given as a word -> its place on the 0-1 risk_score scale (high -> 0.85)", ge=0, le=1,
        optional=True))
    country_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of an attribute name that mark it as holding a country (country, jurisdiction, ...)"))
    text_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of an attribute name that mark it as free text, searched for country names (memo, note, ...)"))
    qualifier_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of an attribute name that qualify a fact without changing it (market_price_estimate is a market "
        "price): a name no vocabulary name matches is matched again without as few of them as needed", optional=True))
    scope_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of an attribute name saying where a count was counted (declines_merchant are declines): dropped "
        "like qualifiers, but only to match a count", optional=True))
    location_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of a country attribute's name saying where the activity happens (ip, login, ...; location_mismatch)",
        optional=True))
    home_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of a country attribute's name saying where the customer lives (home, residence, ...)", optional=True))
    listed_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of an attribute name saying it describes a screening list's entry (listed, sdn, ...; "
        "identifiers_differ)", optional=True))
    designation_words: Mapping[str, str] = field(default_factory=dict, metadata=knob(
        "a word saying a party is on a sanctions or designation list (designated, listed, sdn, ...) -> the list or "
        "programme it names (policies/risk_designation.py)", optional=True))
    designation_parties: tuple[str, ...] = field(default=(), metadata=knob(
        "words naming a party a list can designate (vessel, bank, owner, person, ...; designation_stated)",
        optional=True))
    identifier_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of an attribute name saying it identifies a person (nationality, dob, ...)", optional=True))
    country_lists: Mapping[str, tuple[str, ...]] = field(default_factory=dict, metadata=knob(
        "list name -> ISO 3166-1 alpha-2 codes; each list is a fact, true when the event names one of them",
        key_pattern=NAME_PATTERN, key_rule=_NAME_RULE))
    usd_value: Mapping[str, float] = field(default_factory=dict, metadata=knob(
        "currency -> approximate USD value of one unit (amount_usd; thresholds only)", gt=0,
        key_pattern=CURRENCY_PATTERN, key_rule=_CURRENCY_RULE))
    reporting_thresholds: Mapping[str, tuple[float, ...]] = field(default_factory=dict, metadata=knob(
        "currency -> cash reporting / identification thresholds in that currency (reporting_ratio)", gt=0,
        key_pattern=CURRENCY_PATTERN, key_rule=_CURRENCY_RULE))
    instrument_thresholds: Mapping[str, tuple[float, ...]] = field(default_factory=dict, metadata=knob(
        "currency -> record-keeping thresholds for monetary instruments bought with cash (reporting_ratio, on an "
        "event whose `instrument_purchase` fact holds)", gt=0, key_pattern=CURRENCY_PATTERN, key_rule=_CURRENCY_RULE,
        optional=True))
    instrument_purchase: str = field(default="", metadata=knob(
        "the flag fact of an event that buys a monetary instrument (money order, cashier's check, bank draft)",
        optional=True))
    round_unit: float = field(default=1000.0, metadata=knob(
        "an amount that is a whole multiple of this (in its currency) is round", gt=0))
    recent_days: float = field(default=7.0, metadata=knob(
        "a flag given as a date or an age (password_changed_at) is true when this recent", gt=0, unit="days"))
    short_window_weight: float = field(default=2.0, metadata=knob(
        "per-day counts: a count over an hour or less weighs this many times", ge=1))
    similar_count: str = field(default="", metadata=knob(
        "the count fact of the account's recent similar transactions (aggregate_ratio)", optional=True))
    similar_total: str = field(default="", metadata=knob(
        "the number fact of their total amount (aggregate_ratio)", optional=True))
    expected_amount: str = field(default="", metadata=knob(
        "the per-day number fact of the customer's expected activity (profile_months: the amount as months of it)",
        optional=True))
    threshold_amount: str = field(default="", metadata=knob(
        "the number fact of a reporting or identification threshold the event states (reporting_ratio uses it "
        "beside the currency's)", optional=True))
    similar_window_days: float = field(default=7.0, metadata=knob(
        "similar_count and similar_total are read only over windows up to this long: a month's count is the "
        "customer's pattern, not a split", gt=0, unit="days", optional=True))
    usual_amount: str = field(default="", metadata=knob(
        "the number fact of the customer's usual amount per transaction or for the same period (usual_ratio: the "
        "amount over it)", optional=True))
    outflow_amount: str = field(default="", metadata=knob(
        "the number fact of what an incoming credit was passed on as (outflow_ratio: it over the amount, when the "
        "event states no ratio)", optional=True))
    inflow_amount: str = field(default="", metadata=knob(
        "the number fact of the credit an outgoing payment follows (outflow_ratio: the amount over it, when the "
        "event is a withdrawal and states no ratio)", optional=True))
    goods_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of an attribute name saying it describes goods (goods_differ)", optional=True))
    document_words: tuple[str, ...] = field(default=(), metadata=knob(
        "words of such a name saying on which trade document (invoice, bill of lading, ...)", optional=True))
    price_pairs: Mapping[str, str] = field(default_factory=dict, metadata=knob(
        "number fact -> the fair-value fact it is compared with (price_deviation), e.g. unit_price -> market_price"))
    name_pairs: Mapping[str, str] = field(default_factory=dict, metadata=knob(
        "name attribute -> the attribute it must match (names_differ), e.g. payee_name -> beneficiary_account_name"))
    rules: Mapping[str, RiskRule] = field(default_factory=dict, metadata=knob(
        "rule name -> the rule", key_pattern=NAME_PATTERN, key_rule=_NAME_RULE))
    mitigations: Mapping[str, RiskMitigation] = field(default_factory=dict, metadata=knob(
        "mitigation name -> the context that lowers the rules it offsets", key_pattern=NAME_PATTERN,
        key_rule=_NAME_RULE, optional=True))
    combine: Combine = field(default=Combine.SUM, metadata=knob(
        "how the counted rules' points make the score: sum (capped at 100) or independent (each the chance the "
        "event is what it flags: 100 x (1 - prod(1 - points/100)), so scores keep their order instead of "
        "stopping at 100)", optional=True))
    model_points: int = field(default=0, metadata=knob(
        "the most the model's judgement adds (its expected severity x this)", ge=0, le=100))
    medium_at: int = field(default=30, metadata=knob("score at which risk_level is medium", ge=1, le=100,
                                                     at_most="high_at"))
    high_at: int = field(default=60, metadata=knob("score at which risk_level is high", ge=1, le=100))
    review_at: int = field(default=30, metadata=knob("score at which the action is review", ge=1, le=100,
                                                     at_most="block_at"))
    block_at: int | None = field(default=None, metadata=knob(
        "score at which the action is block (none: only a rule's action floor blocks)", ge=1, le=100))
    word_model: Mapping[str, float] = field(default_factory=dict, metadata=knob(
        "the word model (policies/risk_words.py): its intercept and the weights of the amount and the rules' "
        "outcome; fitted by evals/risk_fit.py; empty: the rules' points are the score", key_pattern=MODEL_PATTERN,
        key_rule=_MODEL_RULE, optional=True))
    word_weights: Mapping[str, float] = field(default_factory=dict, metadata=knob(
        "the word model's weight of each marked word of an event (policies/risk_words.py)",
        key_pattern=WORD_PATTERN, key_rule=_WORD_RULE, optional=True))
    review_model: Mapping[str, float] = field(default_factory=dict, metadata=knob(
        "the word model's action head (policies/risk_words.py): as word_model, fitted to whether the action is "
        "review or block; empty: the action follows the score (review_at)", key_pattern=MODEL_PATTERN,
        key_rule=_MODEL_RULE, optional=True))
    review_weights: Mapping[str, float] = field(default_factory=dict, metadata=knob(
        "the action head's weight of each marked word of an event", key_pattern=WORD_PATTERN, key_rule=_WORD_RULE,
        optional=True))
    review_model_at: int = field(default=50, metadata=knob(
        "with an action head: its score (plus the model's points) at which the action is review", ge=1, le=100,
        optional=True))
    block_model: Mapping[str, float] = field(default_factory=dict, metadata=knob(
        "the word model's block head (policies/risk_words.py): as word_model, fitted to whether the action is "
        "block; empty: only a rule's floor (or block_at) blocks", key_pattern=MODEL_PATTERN, key_rule=_MODEL_RULE,
        optional=True))
    block_weights: Mapping[str, float] = field(default_factory=dict, metadata=knob(
        "the block head's weight of each marked word of an event", key_pattern=WORD_PATTERN, key_rule=_WORD_RULE,
        optional=True))
    block_model_at: int = field(default=50, metadata=knob(
        "with a block head: its score (plus the model's points) at which the action is block", ge=1, le=100,
        optional=True))

    def __post_init__(self) -> None:
        for name in ("facts", "name_synonyms", "translations", "checks", "rating_values", "country_lists", "usd_value",
                     "reporting_thresholds", "instrument_thresholds", "price_pairs", "name_pairs", "rules", "mitigations",
                     *MODEL_TABLES):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
