"""The Redis budget scripts: GCRA (the generic cell rate algorithm) in Lua, one atomic
script per decision, on the store's clock (`redis.call('TIME')`).

GCRA keeps one number per budget, the theoretical arrival time `tat` (microseconds): a
budget of `amount` per `window` spends `window/amount` of time per token, and holds
`tokens = (now + window - max(tat, now)) * amount / window`. That is exactly the token
bucket of `proxy.clauses.budget` (full when unknown, refilled at amount/window, capped at
amount, negative after an upload crossed it), so both backends admit the same sequences
(tests/proxy/state/test_gcra.py). A key expires once its bucket is full again.

`ADMIT` mirrors `Budgets.admit` (and spends `reserve` upload bytes of an admitted
request); `SPEND` mirrors `Budgets.take_upload`. The last argument, when not empty,
replaces the store's clock: only the tests pass it, to replay an arrival sequence.
"""

from __future__ import annotations

_COMMON = """
local function now_us(override)
  if override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function bucket(key, amount, span, now)
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  return tat, (now + span - tat) * amount / span
end
local function store(key, tat, now)
  redis.call('SET', key, string.format('%.17g', tat), 'PX', math.floor((tat - now) / 1000) + 1)
end
local function wait(need, tokens, amount, span)
  local s = math.ceil((need - tokens) / (amount * 1000000 / span))
  if s < 1 then s = 1 end
  return s
end
"""

# KEYS: requests, upload. ARGV: requests amount, span (us; 0: none), upload amount,
# span (0: none), body ('' unknown, else bytes), reserve (bytes), clock override.
# Returns {admitted, retry_after_s, refused by (0 none, 1 requests, 2 upload)}.
ADMIT = (
    _COMMON
    + """
local now = now_us(ARGV[7])
local ra, rs, ua, us = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local rtat, utat
if rs > 0 then
  local tokens
  rtat, tokens = bucket(KEYS[1], ra, rs, now)
  if tokens < 1 then return {0, wait(1, tokens, ra, rs), 1} end
end
if us > 0 then
  local tokens
  utat, tokens = bucket(KEYS[2], ua, us, now)
  if ARGV[5] ~= '0' then
    local need = 1
    if ARGV[5] ~= '' then need = tonumber(ARGV[5]) end
    if need > ua or tokens < need then
      return {0, wait(math.min(need, ua), tokens, ua, us), 2}
    end
  end
end
if rs > 0 then store(KEYS[1], rtat + rs / ra, now) end
local reserve = tonumber(ARGV[6])
if us > 0 and reserve > 0 then store(KEYS[2], utat + reserve * us / ua, now) end
return {1, 0, 0}
"""
)

# KEYS: upload. ARGV: amount, span (us), size (bytes), clock override.
# Returns 1 while the upload is within its budget, 0 once it crossed it.
SPEND = (
    _COMMON
    + """
local now = now_us(ARGV[4])
local amount, span, size = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat, tokens = bucket(KEYS[1], amount, span, now)
store(KEYS[1], tat + size * span / amount, now)
if tokens - size >= 0 then return 1 end
return 0
"""
)

# Spending metered after the fact (issue 46). KEYS: one per budget. ARGV: amount and span
# (us) per key, then the clock override. BELOW returns {admitted, retry_after_s, the
# refusing key's 1-based index}; it spends nothing.
BELOW = (
    _COMMON
    + """
local now = now_us(ARGV[#ARGV])
for i = 1, #KEYS do
  local amount, span = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local tat, tokens = bucket(KEYS[i], amount, span, now)
  if tokens < 1 then return {0, wait(1, tokens, amount, span), i} end
end
return {1, 0, 0}
"""
)

# KEYS: one per budget. ARGV: amount, span (us) and the units to charge per key, then the
# clock override. Charges every key (below zero when overspent).
CHARGE = (
    _COMMON
    + """
local now = now_us(ARGV[#ARGV])
for i = 1, #KEYS do
  local amount, span = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1])
  local size = tonumber(ARGV[3 * i])
  local tat = bucket(KEYS[i], amount, span, now)
  store(KEYS[i], tat + size * span / amount, now)
end
return 1
"""
)

# KEYS: one per budget. ARGV: amount and span (us) per key, then the clock override.
# Returns each bucket's units left (as strings: negative when overspent), spending none.
LEVELS = (
    _COMMON
    + """
local now = now_us(ARGV[#ARGV])
local out = {}
for i = 1, #KEYS do
  local amount, span = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  out[i] = string.format('%.17g', (now + span - tat) * amount / span)
end
return out
"""
)
