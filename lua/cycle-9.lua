--[[
  One dispatch round trip of a worker: give back the tokens it is done with,
  then claim up to N waiting tokens, best priority band first and
  oldest-returned first within a band, continuing into lower bands once a
  band has no token waiting (so a lower band's token is never taken while a
  higher band's waits, and many priority levels still give full batches),
  and no more than a fair share: the tokens in play (waiting and held)
  divided by the live workers, so a request's items spread over the workers
  instead of one worker taking all its tokens. Taking a token and recording it as held under a lease is one atomic step,
  so a worker that dies right after loses nothing.

  Input:
    KEYS[1] tokens      ZSET waiting tokens (score: priority band + order)
    KEYS[2] seq         STRING token order counter
    KEYS[3] reqs        HASH active requests
    KEYS[4] held        HASH token -> worker
    KEYS[5] leases      ZSET token -> lease deadline
    KEYS[6] parked      ZSET token -> wake time
    KEYS[7] wake        LIST wake markers (cleared when nothing is waiting)
    KEYS[8] config      HASH queue settings (paused)
    KEYS[9] lastserved  HASH request id -> last claim time (for aging)
    ARGV[1] worker id
    ARGV[2] lease in ms
    ARGV[3] N, the most tokens to claim (0: only give back)
    ARGV[4] "1" to record claim times in lastserved (aging is on)
    ARGV[5] live workers (for the fair share; 1 if unknown)
    ARGV[6..] releases, in threes: token, mode (return | park | drop), park-until ms

  Output:
    the tokens claimed (possibly none). Released tokens this worker no longer
    holds (its lease ran out and the token was recycled) are skipped; tokens of
    finished requests or above a lowered limit are dropped.
]]
--@include _common.lua
local worker, lease, want, aging = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local woken = 0

-- a batch mostly holds tokens of a few requests: read each request once
local cache = {}
local function req(rid)
  local r = cache[rid]
  if not r then
    local p, c, _, s = parse_req(redis.call('HGET', KEYS[3], rid))
    r = {p = p, c = c, s = s}
    cache[rid] = r
  end
  return r
end

local returned = {}
for i = 6, #ARGV, 3 do
  local token, mode = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', KEYS[4], token) == worker then
    redis.call('HDEL', KEYS[4], token)
    redis.call('ZREM', KEYS[5], token)
    local rid, k = parse_token(token)
    local r = req(rid)
    if r.p and k <= r.c and mode ~= 'drop' then
      if mode == 'park' then
        redis.call('ZADD', KEYS[6], ARGV[i + 2], token)
      else
        returned[#returned + 1] = {token, r.p}
      end
    end
  end
end
if #returned > 0 then -- back to the tail of their band, in the order given
  local seq = redis.call('INCRBY', KEYS[2], #returned) - #returned
  for j, t in ipairs(returned) do
    redis.call('ZADD', KEYS[1], fmt((99 - t[2]) * BAND + seq + j), t[1])
  end
  woken = #returned
end

local claimed = {}
local workers = tonumber(ARGV[5]) or 1
if want > 1 and workers > 1 then -- a fair share, so other workers get tokens too
  local in_play = redis.call('ZCARD', KEYS[1]) + redis.call('HLEN', KEYS[4])
  want = math.min(want, math.max(1, math.ceil(in_play / workers)))
end
if want > 0 and redis.call('HGET', KEYS[8], 'paused') ~= '1' then
  local now = now_ms()
  for _ = 1, want + 100 do
    if #claimed >= want then break end
    local top = redis.call('ZRANGE', KEYS[1], 0, 0)
    if #top == 0 then break end
    local token = top[1]
    redis.call('ZREM', KEYS[1], token)
    local rid, k = parse_token(token)
    local r = req(rid)
    -- a token of a finished request, or above a lowered limit, is dropped
    if r.p and k <= r.c and r.s == 'q' then
      redis.call('HSET', KEYS[4], token, worker)
      redis.call('ZADD', KEYS[5], now + lease, token)
      if aging then redis.call('HSET', KEYS[9], rid, now) end
      claimed[#claimed + 1] = token
    end
  end
end
-- wake idle workers only for tokens that are still waiting
local left = redis.call('ZCARD', KEYS[1])
if left == 0 then
  redis.call('DEL', KEYS[7])
elseif woken > 0 then
  wake(KEYS[7], math.min(woken, left))
end
return claimed
