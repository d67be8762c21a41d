--[[
  Give a held token back: to the tail of its request's current priority
  (return), to the parked set until a time (park), or away (drop).

  Input:
    KEYS[1] tokens  ZSET waiting tokens
    KEYS[2] seq     STRING token order counter
    KEYS[3] reqs    HASH active requests
    KEYS[4] held    HASH token -> worker
    KEYS[5] leases  ZSET token -> lease deadline
    KEYS[6] parked  ZSET token -> wake time
    KEYS[7] wake    LIST wake markers
    ARGV[1] token
    ARGV[2] worker id
    ARGV[3] mode: return | park | drop
    ARGV[4] park until (ms epoch), for park

  Output:
    1   released as asked
    0   dropped: its request is gone or the token is above the current limit
    -3  not held by this worker (its lease ran out and it was recycled)
]]
--@include _common.lua
local token, mode = ARGV[1], ARGV[3]
if redis.call('HGET', KEYS[4], token) ~= ARGV[2] then return -3 end -- NOT_HELD
redis.call('HDEL', KEYS[4], token)
redis.call('ZREM', KEYS[5], token)
local rid, k = parse_token(token)
local p, c = parse_req(redis.call('HGET', KEYS[3], rid))
if not p or k > c or mode == 'drop' then return 0 end
if mode == 'park' then
  redis.call('ZADD', KEYS[6], ARGV[4], token)
  return 1
end
redis.call('ZADD', KEYS[1], token_score(KEYS[2], p), token)
wake(KEYS[7], 1)
return 1
