--[[
  A worker that popped a handoff made for another (submit_one-21) takes it
  over: the token and the item become its own, with a fresh lease, if the
  other still holds them (a dead worker's work may have been given back
  meanwhile). The other gets its rest back, as it began: Redis served this
  worker, so the other is still blocked as a rule, and without its rest the
  next handoff would be made for a worker that is not first in line. (A dead
  worker's rest still runs out, see rest-2.)

  Input:
    KEYS[1] held    HASH the queue's token -> worker
    KEYS[2] leases  ZSET the queue's token -> lease deadline
    KEYS[3] items   HASH the request's one item (lean, see _request.lua)
    KEYS[4] ileases ZSET the request's entry id -> lease deadline
    KEYS[5] idle    ZSET the queue's worker id -> when its rest began (ms)
    ARGV[1] token
    ARGV[2] the worker the handoff was made for
    ARGV[3] this worker
    ARGV[4] lease in ms
    ARGV[5] when the other worker's rest began (ms; "" if unknown)

  Output:
    1 taken over, 0 not (run nothing)
]]
--@include _common.lua
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] or redis.call('HGET', KEYS[3], 'h') ~= ARGV[2] then return 0 end
local until_ms = now_ms() + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], until_ms, ARGV[1])
redis.call('HSET', KEYS[3], 'h', ARGV[3])
redis.call('ZADD', KEYS[4], until_ms, redis.call('HGET', KEYS[3], 'e'))
if ARGV[5] ~= '' then redis.call('ZADD', KEYS[5], 'NX', ARGV[5], ARGV[2]) end
return 1
