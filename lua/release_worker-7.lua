--[[
  Give back every token a worker holds in one queue (the worker is dead, or
  restarted, or told to stop at once). Its items are made due separately.

  Input:
    KEYS[1] tokens  ZSET waiting tokens
    KEYS[2] seq     STRING token order counter
    KEYS[3] reqs    HASH active requests
    KEYS[4] held    HASH token -> worker
    KEYS[5] leases  ZSET token -> lease deadline
    KEYS[6] parked  ZSET token -> wake time
    KEYS[7] wake    LIST wake markers (its handoffs are removed)
    ARGV[1] worker id

  Output:
    the distinct request ids whose tokens it held
]]
--@include _common.lua
local held = redis.call('HGETALL', KEYS[4])
local rids, seen, n = {}, {}, 0
for i = 1, #held, 2 do
  local token = held[i]
  if held[i + 1] == ARGV[1] then
    redis.call('HDEL', KEYS[4], token)
    redis.call('ZREM', KEYS[5], token)
    local rid, k = parse_token(token)
    local p, c = parse_req(redis.call('HGET', KEYS[3], rid))
    if p and k <= c then
      redis.call('ZADD', KEYS[1], token_score(KEYS[2], p), token)
      n = n + 1
    end
    if not seen[rid] then seen[rid] = true; rids[#rids + 1] = rid end
  end
end
-- handoffs made for it that no one popped: their tokens went back above
for _, v in ipairs(take_handoffs(KEYS[7], ARGV[1])) do
  local rid = cjson.decode(v)[2]
  if not seen[rid] then seen[rid] = true; rids[#rids + 1] = rid end
end
wake(KEYS[7], n)
return rids
