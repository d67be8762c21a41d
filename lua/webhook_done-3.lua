--[[
  Record one attempt of a claimed webhook delivery, then schedule the next
  attempt or close the delivery. Only the claim still holding it may record
  (its deadline is still the delivery's score), so a late sender whose claim
  ran out and was taken over records nothing.

  Input:
    KEYS[1] due        ZSET of deliveries: id -> next attempt, or claim deadline (ms)
    KEYS[2] delivery   HASH of this delivery (attempts, a:N, state, next_at)
    KEYS[3] request's  ZSET of the request's delivery ids
    ARGV[1] delivery id
    ARGV[2] the claim's deadline (ms)
    ARGV[3] the attempt, as JSON text (stored as field a:N)
    ARGV[4] state after it: pending (try again), delivered, failed or refused
    ARGV[5] next attempt (ms), for pending
    ARGV[6] ms to keep a closed delivery
    ARGV[7] attempts kept at most (older a:N fields are dropped)

  Output:
    N  the attempt's number
    0  not (or no longer) this claim's
]]
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local n = redis.call('HINCRBY', KEYS[2], 'attempts', 1)
redis.call('HSET', KEYS[2], 'a:' .. n, ARGV[3], 'state', ARGV[4])
local old = n - tonumber(ARGV[7])
if old > 0 then redis.call('HDEL', KEYS[2], 'a:' .. old) end
if ARGV[4] == 'pending' then
  redis.call('ZADD', KEYS[1], ARGV[5], ARGV[1])
  redis.call('HSET', KEYS[2], 'next_at', ARGV[5])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], 'next_at')
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[6]) then redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
end
return n
