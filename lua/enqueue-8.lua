--[[
  Register a created request with its queue: refuse a duplicate, else either
  schedule it (delay) or give it `concurrency` tokens at its priority.

  Input:
    KEYS[1] tokens   ZSET waiting tokens
    KEYS[2] seq      STRING token order counter
    KEYS[3] reqs     HASH active requests
    KEYS[4] wake     LIST wake markers
    KEYS[5] dedup    HASH de-dup key -> request id
    KEYS[6] sched    ZSET scheduled request ids by ready time
    KEYS[7] index    ZSET live request ids by creation time
    KEYS[8] rate     HASH rate limits: lim:<rid> -> this request's own, if it has one
    ARGV[1] request id
    ARGV[2] priority (0-99)
    ARGV[3] concurrency limit (>= 1)
    ARGV[4] de-dup key ("" for none)
    ARGV[5] delay in ms (0 = now)
    ARGV[6] tokens to make (<= concurrency; a request never needs more tokens than items)
    ARGV[7] "1" if the ready time is kept in a schedule shard (far off; see
            core/engine/schedule.py): register it as scheduled, leave `sched` alone
    ARGV[8] the request's own rate limit, "count|window_ms|margin_ms" ("" for none)

  Output:
    {0, id}        queued
    {1, id}        scheduled
    {2, other_id}  duplicate of a pending or running request
    {3, id}        already registered (idempotent repeat)
]]
--@include _common.lua
local rid, p, c, dkey, delay = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local m = math.min(c, tonumber(ARGV[6]))

if redis.call('HEXISTS', KEYS[3], rid) == 1 then return {3, rid} end
if dkey ~= '' then
  local other = redis.call('HGET', KEYS[5], dkey)
  if other and redis.call('HEXISTS', KEYS[3], other) == 1 then return {2, other} end
  redis.call('HSET', KEYS[5], dkey, rid)
end

local now = now_ms()
redis.call('ZADD', KEYS[7], now, rid)
if ARGV[8] ~= '' then redis.call('HSET', KEYS[8], 'lim:' .. rid, ARGV[8]) end
if delay > 0 then
  redis.call('HSET', KEYS[3], rid, req_value(p, c, m, 's'))
  if ARGV[7] ~= '1' then redis.call('ZADD', KEYS[6], now + delay, rid) end
  return {1, rid}
end

redis.call('HSET', KEYS[3], rid, req_value(p, c, m, 'q'))
local seq = redis.call('INCRBY', KEYS[2], m) - m
for k = 1, m do
  redis.call('ZADD', KEYS[1], fmt((99 - p) * BAND + seq + k), rid .. '#' .. k)
end
wake(KEYS[4], m)
return {0, rid}
