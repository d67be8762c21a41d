--[[
  Record one attempt of a delivery taken with webhook_take, then schedule
  its next attempt or close it, and place its target again: after an
  attempt that timed out the target waits a penalty that doubles with each
  such attempt in a row (first .. longest) and moves to the slow set; an
  attempt the target answered (or refused quickly) clears both. Only the
  claim still holding the delivery may record (its deadline is still the
  delivery's score), so a late sender whose claim ran out records nothing.

  Input:
    KEYS[1] targets    ZSET target id -> when it may be taken next (ms)
    KEYS[2] slow       ZSET the same, for targets whose last attempt timed out
    KEYS[3] target     HASH name, claim, timeouts, until
    KEYS[4] queue      ZSET the target's deliveries -> next attempt, or claim deadline (ms)
    KEYS[5] delivery   HASH of this delivery (attempts, a:N, state, next_at)
    KEYS[6] request's  ZSET of the request's delivery ids
    ARGV[1] delivery id
    ARGV[2] the claim's deadline (ms)
    ARGV[3] the attempt, as JSON text (stored as field a:N)
    ARGV[4] state after it: pending (try again), delivered, failed or refused
    ARGV[5] next attempt (ms), for pending
    ARGV[6] ms to keep a closed delivery
    ARGV[7] attempts kept at most (older a:N fields are dropped)
    ARGV[8] target id
    ARGV[9] what the attempt says of the target: timeout, answered, or none
    ARGV[10] first penalty of a target that timed out (ms)
    ARGV[11] longest penalty (ms)

  Output:
    N  the attempt's number
    0  not (or no longer) this claim's
]]
--@include _common.lua
--@include _webhook.lua
local score = redis.call('ZSCORE', KEYS[4], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then return 0 end
local now = now_ms()
if tonumber(redis.call('HGET', KEYS[3], 'claim') or '0') == tonumber(ARGV[2]) then
  redis.call('HDEL', KEYS[3], 'claim')
end
if redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('ZREM', KEYS[4], ARGV[1])
  wh_place(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[8], now)
  return 0
end
local n = redis.call('HINCRBY', KEYS[5], 'attempts', 1)
redis.call('HSET', KEYS[5], 'a:' .. n, ARGV[3], 'state', ARGV[4])
local old = n - tonumber(ARGV[7])
if old > 0 then redis.call('HDEL', KEYS[5], 'a:' .. old) end
if ARGV[4] == 'pending' then
  redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
  redis.call('HSET', KEYS[5], 'next_at', ARGV[5])
else
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HDEL', KEYS[5], 'next_at')
  redis.call('PEXPIRE', KEYS[5], ARGV[6])
  wh_keep(KEYS[6], ARGV[6])
end
if ARGV[9] == 'timeout' then
  local t = redis.call('HINCRBY', KEYS[3], 'timeouts', 1)
  local penalty = math.min(tonumber(ARGV[11]), tonumber(ARGV[10]) * 2 ^ math.min(t - 1, 40))
  redis.call('HSET', KEYS[3], 'until', fmt(now + penalty))
elseif ARGV[9] == 'answered' then
  redis.call('HDEL', KEYS[3], 'timeouts', 'until')
end
wh_keep(KEYS[3], ARGV[6])
wh_place(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[8], now)
return n
