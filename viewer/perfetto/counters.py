"""Counter tracks of an SM track: its resident CTAs and its scopes in flight over time
(``tracks.COUNTERS``).

Resident CTAs are points of their own, one wherever the count changes (twice a CTA at most).
Scopes in flight change at every scope begin and end, so their counts ride on those events
(``TrackEvent.extra_counter_values``, for the counter track each unit track's header names):
two varints per scope instead of two packets.

An SM track's counter tracks take uuids right after its own. A launch that comes in pieces
(chunks of whole CTAs) keeps its counter tracks, and counting goes on across its pieces: a piece
writes an SM's resident-CTA points up to its horizon, the latest CTA start there so far, and
keeps the intervals (CTAs and scopes) still in flight at it; the next piece counts them with its
own and writes from the horizon on. So the counts are exact while an SM starts its CTAs in the
order pieces hold them (CTA order, as the hardware hands them out); a CTA of a later piece that
started before the horizon is counted from the horizon on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proton_ik.viewer.tracks import COUNTERS, Steps, Tracks, steps

_FIRST = np.iinfo(np.int64).min
_LAST = np.iinfo(np.int64).max


@dataclass(frozen=True)
class InFlight:
    """What a launch going on into the next chunk leaves for its counters: intervals by SM and
    counter, and each SM's horizon (its points from there on are the next piece's)."""

    number: int
    sm: np.ndarray
    counter: np.ndarray  # index into COUNTERS
    begin: np.ndarray
    end: np.ndarray
    horizon: dict[int, int]


@dataclass(frozen=True)
class Points:
    """Counter points, by track then time: each one's track (an index into ``uuid``), time and
    count; and the scopes in flight at each scope event's begin and end, where they ride on it."""

    uuid: np.ndarray  # per SM track (this chunk's, then earlier pieces') and counter
    track: np.ndarray
    ts: np.ndarray
    value: np.ndarray
    at_begin: np.ndarray
    at_end: np.ndarray
    begin_counted: np.ndarray  # False past the horizon: the next piece writes those counts
    end_counted: np.ndarray


def counter_points(
    tracks: Tracks,
    sm_uuid: np.ndarray,
    scopes: tuple[np.ndarray, np.ndarray],
    before: InFlight | None,
    before_uuid: dict[int, int],
    going_on: int | None,
) -> tuple[Points, InFlight | None]:
    """The chunk's counter points. ``scopes``: the scope events' begins and ends; ``before``:
    what the launch going on from the last chunk left, ``before_uuid`` its SMs' uuids;
    ``going_on``: the launch that goes on into the next chunk, if any."""
    sms = _sm_tracks(tracks, sm_uuid, before, before_uuid)
    scope_sm = tracks.unit_sm[tracks.event_track]
    sm, counter, begin, end, low = _intervals(tracks, sms, scope_sm, scopes, before)
    going = sms.launch == going_on if going_on is not None else np.zeros(len(sms.sm), dtype=bool)
    high = _horizons(going, low, sm, counter, begin)

    series = steps(sm * len(COUNTERS) + counter, begin, end)
    key, ts, value = series.group, series.time, series.count
    on, flying = key // len(COUNTERS), key % len(COUNTERS) == 1
    within = (ts >= low[on]) & (ts < high[on])
    # Resident CTAs as points of their own; scopes in flight too where only scopes of earlier
    # pieces begin or end, which no event here carries.
    track, when, count = key[within & ~flying], ts[within & ~flying], value[within & ~flying]
    if before is not None:
        at = _earlier_scopes(before, series, (sm, counter, begin, end), low, high)
        track = np.concatenate([track, at[0] * len(COUNTERS) + 1])
        when, count = np.concatenate([when, at[1]]), np.concatenate([count, at[2]])
        order = _by_track_time(track, when)
        track, when, count = track[order], when[order], count[order]
    scoped = slice(len(tracks.cta_sm), len(tracks.cta_sm) + len(scope_sm))
    points = Points(
        uuid=(sms.uuid[:, None] + 1 + np.arange(len(COUNTERS))).reshape(-1),
        track=track,
        ts=when,
        value=count,
        at_begin=series.at_begin[scoped],
        at_end=series.at_end[scoped],
        begin_counted=scopes[0] < high[scope_sm],
        end_counted=scopes[1] < high[scope_sm],
    )
    if going_on is None or not going.any():
        return points, None
    stay = going[sm] & (end >= high[sm])
    left = InFlight(
        number=int(going_on),
        sm=sms.sm[sm[stay]],
        counter=counter[stay],
        begin=begin[stay],
        end=end[stay],
        horizon=dict(zip(sms.sm[going].tolist(), high[going].tolist(), strict=True)),
    )
    return points, left


@dataclass(frozen=True)
class _SmTracks:
    """The SM tracks counted: this chunk's, then those of the earlier pieces that have no CTA
    here; each one's SM, launch (-1: none) and uuid, and the row of each SM of the launch going
    on from the last chunk."""

    sm: np.ndarray
    launch: np.ndarray
    uuid: np.ndarray
    index_of: dict[int, int]


def _sm_tracks(
    tracks: Tracks, sm_uuid: np.ndarray, before: InFlight | None, before_uuid: dict[int, int]
) -> _SmTracks:
    n_sm = len(tracks.sm)
    sm_launch = tracks.launch[tracks.sm_launch]
    extra: list[int] = []
    index_of: dict[int, int] = {}
    if before is not None:
        mine = sm_launch == before.number
        index_of = dict(zip(tracks.sm[mine].tolist(), np.flatnonzero(mine).tolist(), strict=True))
        for number in sorted(set(before.horizon) - set(index_of)):
            index_of[number] = n_sm + len(extra)
            extra.append(number)
    return _SmTracks(
        sm=np.concatenate([tracks.sm, np.asarray(extra, dtype=np.int64)]),
        launch=np.concatenate([sm_launch, np.full(len(extra), -1 if before is None else before.number)]),
        uuid=np.concatenate([sm_uuid, np.array([before_uuid[sm] for sm in extra], dtype=np.int64)]),
        index_of=index_of,
    )


def _intervals(
    tracks: Tracks,
    sms: _SmTracks,
    scope_sm: np.ndarray,
    scopes: tuple[np.ndarray, np.ndarray],
    before: InFlight | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What the counters count, by SM track and counter: the CTAs, the scopes, then what the
    launch going on left in flight; and per SM track, where its points begin (its horizon)."""
    parts = [
        (tracks.cta_sm, np.zeros(len(tracks.cta_sm), np.int64), tracks.cta_begin, tracks.cta_end),
        (scope_sm, np.ones(len(scope_sm), np.int64), *scopes),
    ]
    low = np.full(len(sms.sm), _FIRST)
    if before is not None:
        at = np.array([sms.index_of[sm] for sm in before.sm.tolist()], dtype=np.int64)
        parts.append((at, before.counter, before.begin, before.end))
        for number, horizon in before.horizon.items():
            low[sms.index_of[number]] = horizon
    sm, counter, begin, end = (np.concatenate(column) for column in zip(*parts, strict=True))
    return sm, counter, begin, end, low


def _horizons(
    going: np.ndarray, low: np.ndarray, sm: np.ndarray, counter: np.ndarray, begin: np.ndarray
) -> np.ndarray:
    """Per SM track, where its points end: for the launch going on into the next chunk, its
    latest CTA start so far (the next piece writes the points from there on); none elsewhere."""
    high = np.full(len(going), _LAST)
    if going.any():
        latest = low.copy()
        starts = counter == 0
        np.maximum.at(latest, sm[starts], begin[starts])
        high[going] = latest[going]
    return high


def _earlier_scopes(
    before: InFlight,
    series: Steps,
    intervals: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    low: np.ndarray,
    high: np.ndarray,
) -> np.ndarray:
    """The scopes in flight where scopes of earlier pieces begin or end, within each SM track's
    points: rows of SM track, time and count."""
    sm, counter, begin, end = intervals
    earlier = (len(counter) - len(before.sm) + np.arange(len(before.sm)))[before.counter == 1]
    track = np.tile(sm[earlier], 2)
    when = np.concatenate([begin[earlier], end[earlier]])
    count = np.concatenate([series.at_begin[earlier], series.at_end[earlier]])
    within = (when >= low[track]) & (when < high[track])
    return _distinct_rows(track[within], when[within], count[within])


def _distinct_rows(track: np.ndarray, when: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The distinct (track, time, count) triples, sorted, as rows of track, time and count:
    np.unique(at, axis=1) without its sort of structured rows (ten times slower)."""
    if len(track) == 0:
        return np.zeros((3, 0), np.int64)
    first_when, first_count = int(when.min()), int(count.min())
    when_span = int(when.max()) - first_when + 1
    count_span = int(count.max()) - first_count + 1
    if (int(track.max()) + 1) * when_span * count_span < 1 << 63:
        # One key per row: its sort takes a tenth of the lexsort's time, and the rows come back
        # from the distinct keys without gathers. (np.unique is slower than sorting here: numpy 2
        # hashes first.)
        key = (track * when_span + (when - first_when)) * count_span + (count - first_count)
        key.sort()
        distinct = np.ones(len(key), dtype=bool)
        np.not_equal(key[1:], key[:-1], out=distinct[1:])
        key = key[distinct]
        count = key % count_span + first_count
        key //= count_span
        when = key % when_span + first_when
        return np.stack([key // when_span, when, count])
    at = np.stack([track, when, count])
    at = at[:, np.lexsort(at[::-1])]
    first = np.ones(at.shape[1], dtype=bool)
    first[1:] = (at[:, 1:] != at[:, :-1]).any(axis=0)
    return at[:, first]


def _by_track_time(track: np.ndarray, when: np.ndarray) -> np.ndarray:
    """The order by track, then time; ties in row order."""
    if len(track) == 0:
        return np.zeros(0, np.int64)
    first_when = int(when.min())
    when_span = int(when.max()) - first_when + 1
    row_bits = (len(track) - 1).bit_length()
    if (int(track.max()) + 1) * when_span << row_bits < 1 << 63:
        # The row in the low bits keeps ties in row order. The rows come as two runs already in
        # order (this piece's points, then the earlier scopes'): the stable sort (timsort) merges
        # them in one pass.
        key = track * when_span
        key += when - first_when
        key <<= row_bits
        key |= np.arange(len(track))
        key.sort(kind="stable")
        key &= (1 << row_bits) - 1
        return key
    return np.lexsort((when, track))
