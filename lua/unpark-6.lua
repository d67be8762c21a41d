--[[
  Wake a request's parked tokens now: new items were added, dead letters
  retried, or stuck items requeued. Also re-registers a reopened request.

  Input:
    KEYS[1] tokens  ZSET waiting tokens
    KEYS[2] seq     STRING token order counter
    KEYS[3] reqs    HASH active requests
    KEYS[4] held    HASH token -> worker
    KEYS[5] parked  ZSET token -> wake time
    KEYS[6] wake    LIST wake markers
    ARGV[1] request id

  Output:
    number of tokens made ready, or -1 if the request is not registered
]]
--@include _common.lua
local rid = ARGV[1]
local p, c, _, s = parse_req(redis.call('HGET', KEYS[3], rid))
if not p then return -1 end -- NOT_FOUND
if s ~= 'q' then return 0 end
local n = 0
for k = 1, c do
  local token = rid .. '#' .. k
  if redis.call('ZREM', KEYS[5], token) == 1 then
    redis.call('ZADD', KEYS[1], token_score(KEYS[2], p), token)
    n = n + 1
  end
end
wake(KEYS[6], n)
return n
