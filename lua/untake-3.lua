--[[
  Give back items a worker took but cannot run (it lacks their processor:
  core/engine/routing.py) as if it had not taken them: each one's delivery
  count goes back to what it was before the take, so the attempt is not
  counted, and it is due at once, ahead of undelivered items, for the next
  holder of one of the request's tokens. A request that nothing had started
  before goes back to queued. Items this worker no longer holds are left
  alone (their lease ran out and another worker has them).

  Input:
    KEYS[1] meta    HASH of the request
    KEYS[2] items   STREAM of the request (a HASH for a lean request, _request.lua)
    KEYS[3] leases  ZSET entry id -> lease deadline
    ARGV[1] worker id
    ARGV[2..] pairs: entry id, the attempt number the take gave it

  Output:
    the number of items given back
]]
--@include _common.lua
local now, n, fresh = now_ms(), 0, 0
local lean = redis.call('TYPE', KEYS[2])['ok'] == 'hash'
for i = 2, #ARGV, 2 do
  local id, before = ARGV[i], tonumber(ARGV[i + 1]) - 1
  local mine = false
  if lean then
    local f = redis.call('HMGET', KEYS[2], 'e', 'h', 'c')
    mine = f[1] == id and f[2] == ARGV[1] and f[3] ~= '1'
    if mine then
      redis.call('HDEL', KEYS[2], 'h')
      redis.call('HSET', KEYS[2], 'd', before)
      -- never delivered: no lease at all, as create left it; else due now, as for a redelivery
      if before == 0 then redis.call('ZREM', KEYS[3], id) else redis.call('ZADD', KEYS[3], now - 1, id) end
    end
  else
    local p = redis.call('XPENDING', KEYS[2], 'g', id, id, 1)
    mine = #p == 1 and p[1][2] == ARGV[1] and redis.call('ZSCORE', KEYS[3], id) ~= false
    if mine then
      -- the next take's XCLAIM counts one delivery more: the same attempt number again
      redis.call('XCLAIM', KEYS[2], 'g', ARGV[1], 0, id, 'RETRYCOUNT', before, 'JUSTID')
      redis.call('ZADD', KEYS[3], now - 1, id)
    end
  end
  if mine then
    n = n + 1
    if before == 0 then fresh = fresh + 1 end
  end
end
-- the take made the request running: undo that if nothing else of it ever started
if n > 0 and fresh == n and redis.call('HGET', KEYS[1], 'state') == 'running' then
  local v = redis.call('HMGET', KEYS[1], 'done', 'failed', 'expired')
  local finished = (tonumber(v[1]) or 0) + (tonumber(v[2]) or 0) + (tonumber(v[3]) or 0)
  if finished == 0 and redis.call('ZCARD', KEYS[3]) == (lean and 0 or fresh) then
    redis.call('HSET', KEYS[1], 'state', 'queued')
    redis.call('HDEL', KEYS[1], 'started_at')
  end
end
return n
