"""Deterministic synthetic BNPL data: customers, merchants and the daily transaction feed, each record a pure
function of (config, day): ``random.Random`` seeded with strings, never the global generator or ``hash()``."""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import functools
import itertools
import math
import random
import threading

EPOCH = datetime.date(2024, 1, 1)
# Served horizon (10 years): a typo'd year must not make the server build millions of customers.
LAST_DAY = EPOCH + datetime.timedelta(days=3652)


@dataclasses.dataclass(frozen=True)
class ApiConfig:
    seed: int = 7
    transactions_per_day: int = 200  # exact number of distinct transactions per day
    token: str = "etr-local-token"  # bearer token clients must send
    base_customers: int = 300  # customers existing at EPOCH
    signups_per_day: int = 3  # new customers each day after EPOCH
    merchants: int = 60
    max_page_size: int = 1000

    def __post_init__(self) -> None:
        if not 0 <= self.transactions_per_day <= 999_999:  # seq is six digits of transaction_id
            raise ValueError(f"transactions_per_day must be 0..999999, got {self.transactions_per_day}")
        if self.base_customers < 0 or self.signups_per_day < 0 or self.merchants < 0 or self.max_page_size < 1:
            raise ValueError("base_customers, signups_per_day and merchants must be >= 0, max_page_size >= 1")
        if self.transactions_per_day and (self.base_customers < 1 or self.merchants < 1):
            raise ValueError("transactions need at least one base customer and one merchant")


_FIRST = (
    "Aisyah,Ahmad,Mei Ling,Wei Jie,Priya,Arjun,Nurul,Hafiz,Siti,Jun Hao,Kavitha,Daniel,Farah,Ravi,"
    "Li Ting,Amir,Sarah,Hui Min,Zul,Chloe"
).split(",")
_LAST = (
    "Abdullah Tan Lim Lee Wong Ng Rahman Ismail Kumar Raj Chua Goh Hassan Ong Yusof Teo Pillai Chan Koh Aziz".split()
)
_CITIES = {
    "MY": "Kuala Lumpur,Petaling Jaya,Shah Alam,George Town,Johor Bahru,Ipoh,Kota Kinabalu,Kuching,Melaka".split(","),
    "SG": "Singapore,Tampines,Jurong West,Woodlands,Ang Mo Kio,Bedok".split(","),
}
_MCC = {"FASHION": "5651", "ELECTRONICS": "5732", "TRAVEL": "4722", "GROCERY": "5411", "BEAUTY": "5977", "HOME": "5712"}
_BRAND = ("Batik", "Lumen", "Harbour", "Kopi", "Orchid", "Nova", "Merdeka", "Jade", "Sunway", "Tiger", "Lotus", "Pixel")


def _ts(ordinal: int, seconds: int) -> str:
    """ISO-8601 UTC text for a second offset (may exceed one day) from the start of a day ordinal."""
    days, secs = divmod(seconds, 86400)  # formatted by hand: strftime dominated customers_as_of's cost
    return f"{_day_text(ordinal + days)}T{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}Z"


@functools.lru_cache(maxsize=4096)
def _day_text(ordinal: int) -> str:
    return datetime.date.fromordinal(ordinal).isoformat()


def _weighted(values: tuple, weights: tuple):
    """``rng.choices(values, weights)[0]`` with the cumulative weights summed once (choices sums them on every
    call): the same draw from the same ``rng.random()`` call."""
    cumulative, total, last = list(itertools.accumulate(weights)), sum(weights) + 0.0, len(values) - 1
    return lambda rng: values[bisect.bisect_right(cumulative, rng.random() * total, 0, last)]


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"  # integer cents: no float rounding in the text


def check_day(day: datetime.date) -> None:
    if not isinstance(day, datetime.date) or isinstance(day, datetime.datetime):
        raise TypeError(f"expected a datetime.date, got {day!r}")
    if not EPOCH <= day <= LAST_DAY:
        raise ValueError(f"day {day} is outside {EPOCH}..{LAST_DAY}")


# Slowly changing entities: an initial record plus change events on a few days.


class _Timeline:
    """One entity's history, drawn lazily from its own Random so a far day costs only that entity's events. The
    draw order is fixed, so results never depend on which days were asked for first."""

    def __init__(self, rng: random.Random, initial: dict, start: int, mean_gap: float, mutate) -> None:
        self.initial, self.days, self.changes = initial, [], []
        self._rng, self._mean_gap, self._mutate, self._state = rng, mean_gap, mutate, dict(initial)
        self._next = start + self._gap()

    def _gap(self) -> int:
        return 1 + int(self._rng.expovariate(1 / self._mean_gap))  # exponential gaps ~ a fixed daily change rate

    def as_of(self, ordinal: int) -> dict:
        while self._next <= ordinal:
            change = {"updated_at": _ts(self._next, self._rng.randrange(86400))}
            change.update(self._mutate(self._rng, self._state))
            self._state.update(change)
            self.days.append(self._next)
            self.changes.append(change)
            self._next += self._gap()
        record = dict(self.initial)
        for change in self.changes[: bisect.bisect_right(self.days, ordinal)]:
            record.update(change)
        return record


def _email(rng: random.Random, first: str, last: str) -> str:
    domain = rng.choice(("gmail.com", "yahoo.com", "outlook.com", "hotmail.my"))
    return f"{first.replace(' ', '').lower()}.{last.lower()}{rng.randrange(1, 999)}@{domain}"


def _phone(rng: random.Random, country: str) -> str:
    if country == "SG":
        return f"+65 {rng.choice('89')}{rng.randrange(1000):03d} {rng.randrange(10000):04d}"
    return f"+601{rng.randrange(10)}-{rng.randrange(1000000, 9999999)}"


def _mutate_customer(rng: random.Random, state: dict) -> dict:
    field = rng.choices(("email", "phone", "city", "risk_segment", "credit_limit"), (2, 2, 1, 1, 2))[0]
    if field in ("email", "phone"):
        # A present value is sometimes withdrawn (NULL); a missing one is always supplied again later.
        if state[field] is not None and rng.random() < 0.15:
            return {field: None}
        if field == "email":
            return {field: _email(rng, state["first_name"], state["last_name"])}
        return {field: _phone(rng, state["country"])}
    if field == "city":
        return {"city": rng.choice([c for c in _CITIES[state["country"]] if c != state["city"]])}
    if field == "risk_segment":
        return {"risk_segment": rng.choice([r for r in ("LOW", "MEDIUM", "HIGH") if r != state["risk_segment"]])}
    return {"credit_limit": _money(rng.randrange(1, 41) * 50000)}


def _new_customer(config: ApiConfig, index: int) -> _Timeline:
    customer_id = 100001 + index
    rng = random.Random(f"etr:{config.seed}:customer:{customer_id}")
    if index < config.base_customers:
        created = EPOCH.toordinal() - rng.randint(1, 730)
        start = EPOCH.toordinal()  # history before EPOCH is folded into the initial record
    else:
        created = start = EPOCH.toordinal() + 1 + (index - config.base_customers) // config.signups_per_day
    created_at = _ts(created, rng.randrange(86400))
    first, last, country = rng.choice(_FIRST), rng.choice(_LAST), rng.choices(("MY", "SG"), (85, 15))[0]
    initial = {
        "customer_id": customer_id,
        "first_name": first,
        "last_name": last,
        "email": None if rng.random() < 0.05 else _email(rng, first, last),
        "phone": None if rng.random() < 0.08 else _phone(rng, country),
        "date_of_birth": datetime.date.fromordinal(
            datetime.date(1955, 1, 1).toordinal() + rng.randrange(50 * 365)
        ).isoformat(),
        "city": rng.choice(_CITIES[country]),
        "country": country,
        "credit_limit": _money(rng.randrange(1, 41) * 50000),
        "risk_segment": rng.choices(("LOW", "MEDIUM", "HIGH"), (50, 35, 15))[0],
        "created_at": created_at,
        "updated_at": created_at,
    }
    return _Timeline(rng, initial, start, 70.0, _mutate_customer)  # ~1.4% of days change


def _new_merchant(config: ApiConfig, index: int) -> _Timeline:
    merchant_id = 500001 + index
    rng = random.Random(f"etr:{config.seed}:merchant:{merchant_id}")
    category = rng.choice(tuple(_MCC))
    created_at = _ts(EPOCH.toordinal() - rng.randint(30, 1500), rng.randrange(86400))
    initial = {
        "merchant_id": merchant_id,
        "name": f"{rng.choice(_BRAND)} {category.title()} {rng.choice(('Sdn Bhd', 'Pte Ltd', 'Store', 'Co'))}",
        "category": category,
        "mcc": _MCC[category],
        "country": rng.choices(("MY", "SG"), (80, 20))[0],
        "status": "ACTIVE",
        "created_at": created_at,
        "updated_at": created_at,
    }
    flip = lambda rng, state: {"status": "SUSPENDED" if state["status"] == "ACTIVE" else "ACTIVE"}  # noqa: E731
    return _Timeline(rng, initial, EPOCH.toordinal(), 333.0, flip)  # ~0.3% of days change


# Timelines are cached per (config, kind, index); the lock serialises the server's request threads.
_LOCK = threading.RLock()
_TIMELINES: dict[tuple, _Timeline] = {}


def _as_of(config: ApiConfig, kind: str, count: int, day: datetime.date) -> list[dict]:
    make = _new_customer if kind == "customer" else _new_merchant
    with _LOCK:
        if len(_TIMELINES) > 200_000:  # many configs in one long process: start over rather than grow forever
            _TIMELINES.clear()
        _TIMELINES.update(
            {(config, kind, i): make(config, i) for i in range(count) if (config, kind, i) not in _TIMELINES}
        )
        return [_TIMELINES[(config, kind, i)].as_of(day.toordinal()) for i in range(count)]


def _customer_count(config: ApiConfig, day: datetime.date) -> int:
    return config.base_customers + config.signups_per_day * (day - EPOCH).days


def customers_as_of(config: ApiConfig, day: datetime.date) -> list[dict]:
    """Every customer as of the end of ``day``, sorted by customer_id."""
    check_day(day)
    return _as_of(config, "customer", _customer_count(config, day), day)


def merchants_as_of(config: ApiConfig, day: datetime.date) -> list[dict]:
    """Every merchant as of the end of ``day``, sorted by merchant_id."""
    check_day(day)
    return _as_of(config, "merchant", config.merchants, day)


_STATUS = _weighted(("PENDING", "APPROVED", "PROCESSED", "DECLINED", "REFUNDED"), (3, 46, 44, 4, 3))
_CURRENCY = _weighted(("MYR", "SGD", "USD"), (80, 12, 8))
_INSTALMENTS = _weighted((3, 4, 6, 12), (50, 25, 15, 10))
_PAYMENT_METHOD = _weighted(("CARD", "FPX", "EWALLET", "DIRECT_DEBIT"), (45, 20, 25, 10))


def transactions_for(config: ApiConfig, day: datetime.date) -> list[dict]:
    """The day's feed in served order: one final record per transaction, plus ~3% stale PENDING copies."""
    check_day(day)
    rng = random.Random(f"etr:{config.seed}:transactions:{day.isoformat()}")
    n, ordinal, first_id = config.transactions_per_day, day.toordinal(), int(day.strftime("%Y%m%d")) * 1_000_000
    customers, day_text = _customer_count(config, day), day.isoformat()
    finals = []
    for seq, created in enumerate(sorted(rng.randrange(86400) for _ in range(n)), 1):
        status = _STATUS(rng)
        lag = 0 if status == "PENDING" else min(60 + int(rng.expovariate(1 / 7200)), 2 * 86400)
        cents = round(math.exp(rng.gauss(4.4, 1.0)) * 100)  # log-normal: many small baskets, a long tail
        record = {
            "transaction_id": first_id + seq,
            "customer_id": 100001 + int(customers * rng.random() ** 1.3),  # some customers buy more often
            "merchant_id": 500001 + rng.randrange(config.merchants),
            "amount": _money(min(max(cents, 500), 250000)),
            "currency": _CURRENCY(rng),
            "instalments": _INSTALMENTS(rng),
            "payment_method": _PAYMENT_METHOD(rng),
            "status": status,
            "transaction_date": day_text,
            "created_at": _ts(ordinal, created),
            "updated_at": _ts(ordinal, created + lag),
        }
        finals.append(record)
    # Re-sent transactions: the stale copy goes after the final one for every other pick, so consumers
    # must deduplicate on updated_at, not on position in the feed.
    eligible = [i for i, record in enumerate(finals) if record["status"] != "PENDING"]
    picks = sorted(rng.sample(eligible, min(len(eligible), max(1, round(n * 0.03))))) if eligible else []
    keyed = [(float(i), 0, record) for i, record in enumerate(finals)]
    for j, i in enumerate(picks):
        stale = dict(finals[i], status="PENDING", updated_at=finals[i]["created_at"])
        keyed.append((rng.uniform(i + 0.01, n) if j % 2 == 0 else rng.uniform(-1.0, i - 0.01), 1, stale))
    return [record for _, _, record in sorted(keyed, key=lambda item: item[:2])]
