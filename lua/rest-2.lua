--[[
  A worker's rest on one queue, for handoffs (submit_one-21): "in" as it
  blocks on the wake list (for at most REST_MS, _common.lua), "out" once it
  woke. A rest is scored by when it began: the longest at rest is the
  client Redis serves first among those blocked on the list. Out, if a
  handoff took its rest, the handoffs to it still on the wake list are
  removed and returned (it holds their tokens: it runs them or hands them
  back).

  Input:
    KEYS[1] idle  ZSET worker id -> when its rest began (ms)
    KEYS[2] wake  LIST wake markers and handoffs
    ARGV[1] worker id
    ARGV[2] "in" or "out"

  Output:
    in: 1; out: the handoffs to this worker that were still on the wake list
]]
--@include _common.lua
if ARGV[2] == 'in' then
  redis.call('ZADD', KEYS[1], now_ms(), ARGV[1])
  return 1
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then return {} end
return take_handoffs(KEYS[2], ARGV[1])
