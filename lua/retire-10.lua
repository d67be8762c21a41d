--[[
  Remove a finished (or cancelled) request from its queue's dispatch: its
  tokens wherever they are, its schedule entry, its de-dup claim and its
  own rate limit.
  Idempotent; a worker still holding one of its tokens gets NOT_HELD later.

  Input:
    KEYS[1] tokens      ZSET waiting tokens
    KEYS[2] reqs        HASH active requests
    KEYS[3] held        HASH token -> worker
    KEYS[4] leases      ZSET token -> lease deadline
    KEYS[5] parked      ZSET token -> wake time
    KEYS[6] dedup       HASH de-dup key -> request id
    KEYS[7] sched       ZSET scheduled request ids
    KEYS[8] index       ZSET live request ids
    KEYS[9] lastserved  HASH request id -> last claim time
    KEYS[10] rate       HASH rate limits (its own limit and count go)
    ARGV[1] request id
    ARGV[2] de-dup key ("" for none)

  Output:
    1 retired now, 0 was not registered
]]
--@include _common.lua
local rid = ARGV[1]
local _, _, m = parse_req(redis.call('HGET', KEYS[2], rid))
if ARGV[2] ~= '' and redis.call('HGET', KEYS[6], ARGV[2]) == rid then
  redis.call('HDEL', KEYS[6], ARGV[2])
end
redis.call('ZREM', KEYS[7], rid)
redis.call('ZREM', KEYS[8], rid)
redis.call('HDEL', KEYS[9], rid)
redis.call('HDEL', KEYS[10], 'lim:' .. rid, 'n:' .. rid)
if not m then return 0 end
for k = 1, m do
  local token = rid .. '#' .. k
  redis.call('ZREM', KEYS[1], token)
  redis.call('HDEL', KEYS[3], token)
  redis.call('ZREM', KEYS[4], token)
  redis.call('ZREM', KEYS[5], token)
end
redis.call('HDEL', KEYS[2], rid)
return 1
