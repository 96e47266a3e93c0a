"""The table settings that decide a Merge-on-Read merge, read once from ``hoodie.properties``.

Every path that merges versions of a record (snapshot and incremental reads, the Spark scan,
compaction, clustering, the writers' dedupe) takes a :class:`MergeConfig` instead of a bare
ordering field, so a setting Hudi honours is honoured everywhere or refused everywhere, by name
(:class:`~multiwriter.errors.MergeSettingError`). ``docs/merge-settings.md`` lists each setting.

How Hudi names a table's merge (``HoodieTableConfig``):

- version 9 records ``hoodie.record.merge.mode``, ``hoodie.table.partial.update.mode`` and
  ``hoodie.record.merge.property.*``; a payload class Hudi 1.1 deprecates is kept only as
  ``hoodie.table.legacy.payload.class`` (``inferMergingConfigsForV9TableCreation``, also the 8 to
  9 upgrade), a custom one as ``hoodie.compaction.payload.class`` under mode ``CUSTOM``;
- versions 6 and 8 name a payload class (``hoodie.compaction.payload.class``) and, since 8, a
  merge strategy id (``hoodie.record.merge.strategy.id``) and a merge mode; Hudi infers the mode
  from them (``inferMergingConfigsForPreV9Table``: version 8 asks the strategy id first, 6 the
  payload class; neither set: the recorded mode, else event time when an ordering field is
  named). ``EVENT_TIME_ORDERING`` without an ordering field merges by commit time, and
  ``COMMIT_TIME_ORDERING`` ignores one.

A payload class whose behaviour Hudi 1.1 maps onto a merge mode (and a partial-update mode) at
the 8 to 9 upgrade is read as that mode on every version; other payloads and custom mergers
are refused.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import MergeSettingError
from .delete_markers import DELETE_FIELD_KEY, DELETE_MARKER_KEY, MERGE_PROPERTY_PREFIX
from .properties import (
    COMMIT_TIME_STRATEGY,
    EVENT_TIME_STRATEGY,
    MERGE_MODE_KEY,
    PARTIAL_UPDATE_MODE_KEY,
    PAYLOAD_CLASS_KEY,
    PROPERTIES_FILE,
    STRATEGY_ID_KEY,
    TableConfig,
)

EVENT_TIME = "EVENT_TIME_ORDERING"
COMMIT_TIME = "COMMIT_TIME_ORDERING"
CUSTOM = "CUSTOM"
#: partial-update modes (``PartialUpdateMode``) this package merges by
NO_PARTIAL = "NONE"
IGNORE_DEFAULTS = "IGNORE_DEFAULTS"
HONOURED_PARTIAL_MODES = (NO_PARTIAL, IGNORE_DEFAULTS)

LEGACY_PAYLOAD_CLASS_KEY = "hoodie.table.legacy.payload.class"

#: the payload-based strategy id (the built-in event-time and commit-time ones: :mod:`.properties`)
PAYLOAD_STRATEGY = "00000000-0000-0000-0000-000000000000"
_STRATEGY_MODES = {EVENT_TIME_STRATEGY: EVENT_TIME, COMMIT_TIME_STRATEGY: COMMIT_TIME}

_MODEL = "org.apache.hudi.common.model."
#: payload class -> (merge mode, partial-update mode) as Hudi 1.1 maps the payloads it deprecates
#: (``HoodieTableConfig.PAYLOADS_UNDER_DEPRECATION``, ``EVENT_TIME_ORDERING_PAYLOADS``,
#: ``inferMergingConfigsForV9TableCreation``); the ones a merge of ours reproduces
HONOURED_PAYLOADS: dict[str, tuple[str, str]] = {
    _MODEL + "DefaultHoodieRecordPayload": (EVENT_TIME, NO_PARTIAL),
    _MODEL + "EventTimeAvroPayload": (EVENT_TIME, NO_PARTIAL),
    _MODEL + "OverwriteWithLatestAvroPayload": (COMMIT_TIME, NO_PARTIAL),
    _MODEL + "PartialUpdateAvroPayload": (EVENT_TIME, IGNORE_DEFAULTS),
    _MODEL + "OverwriteNonDefaultsWithLatestAvroPayload": (COMMIT_TIME, IGNORE_DEFAULTS),
}
#: ``inferRecordMergeModeFromPayloadClass``: every other payload is CUSTOM (its own merge)
_PAYLOAD_MODES = {_MODEL + "DefaultHoodieRecordPayload": EVENT_TIME, _MODEL + "EventTimeAvroPayload": EVENT_TIME,
                  _MODEL + "OverwriteWithLatestAvroPayload": COMMIT_TIME}
#: what each payload Hudi maps but this package does not merge by needs
REFUSED_PAYLOADS: dict[str, str] = {
    _MODEL + "AWSDmsAvroPayload": "a delete marker (field Op = D)",
    _MODEL + "debezium.MySqlDebeziumAvroPayload": "Debezium's binlog ordering fields and delete marker",
    _MODEL + "debezium.PostgresDebeziumAvroPayload": "the IGNORE_MARKERS partial-update mode and a delete marker",
}


@dataclass(frozen=True)
class MergeConfig:
    """How versions of one record merge: by ``mode`` (event time: the greatest ``ordering_fields``
    value, compared field by field as Hudi's ``ArrayComparable``; commit time: the latest
    version), then ``partial_update_mode`` (``IGNORE_DEFAULTS``: a null value of the winner
    takes the loser's, ``PartialUpdateHandler.reconcileDefaultValues``). ``ordering_fields`` is
    empty exactly when the merge is by commit time. ``payload_class`` / ``strategy_id``: what the
    table names, for messages."""

    mode: str = COMMIT_TIME
    ordering_fields: tuple[str, ...] = ()
    partial_update_mode: str = NO_PARTIAL
    payload_class: str | None = None
    strategy_id: str | None = None

    @classmethod
    def event_time(cls, ordering_field: str | None) -> MergeConfig:
        """Event time on one field, or commit time without one (what a bare ordering field meant)."""
        return cls(EVENT_TIME, (ordering_field,)) if ordering_field else cls()

    @property
    def ordering_field(self) -> str | None:
        """The first ordering field (None: commit-time merging)."""
        return self.ordering_fields[0] if self.ordering_fields else None

    @property
    def ignore_defaults(self) -> bool:
        return self.partial_update_mode == IGNORE_DEFAULTS

    @classmethod
    def from_table_config(cls, config: TableConfig, source: str = PROPERTIES_FILE) -> MergeConfig:
        """The table's merge, as Hudi 1.1 reads it; raises :class:`MergeSettingError` naming the
        setting when it asks for a merge this package does not do (a custom merger or payload,
        a partial-update mode but NONE / IGNORE_DEFAULTS, merge properties such as delete markers)."""
        raw = config.raw
        fields = config.ordering_fields
        mode, partial, payload, strategy = (_v9_merge(raw, fields, source) if config.version >= 9
                                            else _pre_v9_merge(raw, fields, config.version, source))
        _refuse_merge_properties(raw, source)
        if mode == EVENT_TIME and not fields:  # inferMergingConfigsForPreV9Table: commit time then
            mode = COMMIT_TIME
        return cls(mode, fields if mode == EVENT_TIME else (), partial, payload, strategy)


def _v9_merge(raw: dict[str, str], fields: tuple[str, ...], source: str) -> tuple[str, str, str | None, str | None]:
    """Version 9: the recorded mode and partial-update mode (a payload class only under CUSTOM)."""
    mode = raw.get(MERGE_MODE_KEY, "").strip().upper() or (EVENT_TIME if fields else COMMIT_TIME)
    payload = raw.get(PAYLOAD_CLASS_KEY) or raw.get(LEGACY_PAYLOAD_CLASS_KEY)
    strategy = raw.get(STRATEGY_ID_KEY)
    if mode == CUSTOM:
        named = f"{PAYLOAD_CLASS_KEY}={payload}" if payload else f"{STRATEGY_ID_KEY}={strategy}"
        mode = _custom(payload, strategy, source, f"{MERGE_MODE_KEY}=CUSTOM, {named}")[0]
    elif mode not in (EVENT_TIME, COMMIT_TIME):
        raise MergeSettingError(f"{source}: {MERGE_MODE_KEY}={mode} is not a merge mode Hudi knows; fix the table's properties")
    partial = raw.get(PARTIAL_UPDATE_MODE_KEY, NO_PARTIAL).strip().upper() or NO_PARTIAL
    if partial not in HONOURED_PARTIAL_MODES:
        raise MergeSettingError(
            f"{source}: {PARTIAL_UPDATE_MODE_KEY}={partial}: multiwriter merges partial updates by "
            f"{' or '.join(HONOURED_PARTIAL_MODES)} only; read, compact and write this table with Hudi")
    return mode, partial, payload, strategy


def _pre_v9_merge(raw: dict[str, str], fields: tuple[str, ...], version: int, source: str
                  ) -> tuple[str, str, str | None, str | None]:
    """Versions 6 and 8 (``inferMergingConfigsForPreV9Table``): the mode the payload class and
    strategy id imply, checked against a recorded mode; a partial-update mode only through a
    payload (Hudi reads none on these versions, ``HoodieTableConfig.getPartialUpdateMode``)."""
    recorded = raw.get(MERGE_MODE_KEY, "").strip().upper() or None
    payload = raw.get(PAYLOAD_CLASS_KEY) or None
    strategy = raw.get(STRATEGY_ID_KEY) or None
    if payload is None and strategy is None:
        mode = recorded or (EVENT_TIME if fields else COMMIT_TIME)
        if mode == CUSTOM:
            raise MergeSettingError(f"{source}: {MERGE_MODE_KEY}=CUSTOM names neither a payload class nor a merger; "
                                    "read this table with Hudi")
        if mode not in (EVENT_TIME, COMMIT_TIME):
            raise MergeSettingError(f"{source}: {MERGE_MODE_KEY}={mode} is not a merge mode Hudi knows")
        return mode, NO_PARTIAL, None, None
    by_strategy = _STRATEGY_MODES.get(strategy, CUSTOM) if strategy else None
    by_payload = _PAYLOAD_MODES.get(payload, CUSTOM) if payload else None
    first, second = (by_strategy, by_payload) if version >= 8 else (by_payload, by_strategy)
    mode = first or second
    if recorded and _effective(recorded, fields) != _effective(mode, fields):
        raise MergeSettingError(
            f"{source}: {MERGE_MODE_KEY}={recorded} contradicts {PAYLOAD_CLASS_KEY}={payload} / "
            f"{STRATEGY_ID_KEY}={strategy} (Hudi refuses this table too); fix the table's properties")
    if mode != CUSTOM:
        return mode, NO_PARTIAL, payload, strategy
    key = PAYLOAD_CLASS_KEY if payload else STRATEGY_ID_KEY
    mode, partial = _custom(payload, strategy, source, f"{key}={payload or strategy}")
    return mode, partial, payload, strategy


def _effective(mode: str, fields: tuple[str, ...]) -> str:
    """A mode as it merges: event time without an ordering field is commit time (tables this
    package wrote at version 8 before it recorded Hudi's pair, ``OverwriteWithLatestAvroPayload``
    and the commit-time strategy id, name ``DefaultHoodieRecordPayload`` with
    ``COMMIT_TIME_ORDERING`` when they have no ordering field: the same merge, still read)."""
    return COMMIT_TIME if mode == EVENT_TIME and not fields else mode


def _custom(payload: str | None, strategy: str | None, source: str, setting: str) -> tuple[str, str]:
    """A CUSTOM merge: the payload's merge mode when Hudi 1.1 maps it onto one we merge by (the
    payload-based strategy or none), else refused naming the payload or merger."""
    if strategy and strategy not in (PAYLOAD_STRATEGY, *_STRATEGY_MODES):
        raise MergeSettingError(
            f"{source}: {STRATEGY_ID_KEY}={strategy} is a custom record merger; multiwriter merges by event time or "
            "commit time only: read, compact and write this table with Hudi")
    if payload in HONOURED_PAYLOADS:
        return HONOURED_PAYLOADS[payload]
    why = REFUSED_PAYLOADS.get(payload or "", "a custom payload's own merge")
    raise MergeSettingError(
        f"{source}: {setting}: this payload needs {why}, which multiwriter does not merge by; "
        "read, compact and write this table with Hudi")


def _refuse_merge_properties(raw: dict[str, str], source: str) -> None:
    """``hoodie.record.merge.property.*`` change a merge: the custom delete marker is honoured
    (:mod:`.delete_markers`), any other one (a partial-update marker, a merger's own setting) refused."""
    honoured = {MERGE_PROPERTY_PREFIX + DELETE_FIELD_KEY, MERGE_PROPERTY_PREFIX + DELETE_MARKER_KEY}
    named = sorted(k for k in raw if k.startswith(MERGE_PROPERTY_PREFIX) and k not in honoured)
    if named:
        raise MergeSettingError(
            f"{source}: {named[0]}={raw[named[0]]}: multiwriter does not merge by this setting; "
            "read, compact and write this table with Hudi")
