--[[
  Take the best waiting token of a queue: highest priority first, then the
  token returned longest ago. Taking it and recording it as held under a
  lease is one atomic step, so a worker that dies right after loses nothing.

  Input:
    KEYS[1] tokens      ZSET waiting tokens
    KEYS[2] reqs        HASH active requests
    KEYS[3] held        HASH token -> worker
    KEYS[4] leases      ZSET token -> lease deadline
    KEYS[5] wake        LIST wake markers (cleared when nothing is waiting)
    KEYS[6] config      HASH queue settings (paused)
    KEYS[7] lastserved  HASH request id -> last claim time (for aging)
    ARGV[1] worker id
    ARGV[2] lease in ms

  Output:
    {token, priority}  the token claimed
    false              nothing to claim (or the queue is paused)
]]
--@include _common.lua
if redis.call('HGET', KEYS[6], 'paused') == '1' then return false end
local now = now_ms()
for _ = 1, 100 do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  if #popped == 0 then
    redis.call('DEL', KEYS[5])
    return false
  end
  local token = popped[1]
  local rid, k = parse_token(token)
  local p, c, _, s = parse_req(redis.call('HGET', KEYS[2], rid))
  -- a token of a finished request, or above a lowered limit, is dropped
  if p and k <= c and s == 'q' then
    redis.call('HSET', KEYS[3], token, ARGV[1])
    redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), token)
    redis.call('HSET', KEYS[7], rid, now)
    return {token, p}
  end
end
return false
