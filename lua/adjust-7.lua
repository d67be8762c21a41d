--[[
  Change a live request's priority and/or concurrency limit. Waiting tokens
  move to the new priority band at once; held tokens return to it when
  released; tokens above a lowered limit are removed now (or dropped when
  released); a raised limit (or a token found missing) gets fresh tokens.
  A one-item request waiting packed (waiting_packed, _common.lua) stays so:
  its token and its count move to the new band, and a concurrency limit,
  which cannot matter to one item, changes nothing here.

  Input:
    KEYS[1] tokens  ZSET waiting tokens
    KEYS[2] seq     STRING token order counter
    KEYS[3] reqs    HASH active requests
    KEYS[4] held    HASH token -> worker
    KEYS[5] parked  ZSET token -> wake time
    KEYS[6] wake    LIST wake markers
    KEYS[7] packed  HASH priority -> requests waiting packed in its band
    ARGV[1] request id
    ARGV[2] new priority ("" keeps it)
    ARGV[3] new concurrency limit ("" keeps it)

  Output:
    {old priority, old concurrency}
    -1  the request is not registered (finished or unknown)
]]
--@include _common.lua
local rid = ARGV[1]
local p, c, m, s, g = parse_req(redis.call('HGET', KEYS[3], rid))
if not p then -- waiting packed (waiting_packed, _common.lua)
  p = waiting_packed(KEYS[1], rid)
  if not p then return -1 end -- NOT_FOUND
  local np = tonumber(ARGV[2]) or p
  if np ~= p then
    redis.call('ZADD', KEYS[1], token_score(KEYS[2], np), rid .. '#1')
    count_packed(KEYS[7], p, -1)
    count_packed(KEYS[7], np, 1)
  end
  return {p, 1}
end
local np, nc = tonumber(ARGV[2]) or p, tonumber(ARGV[3]) or c
-- tokens wanted: the new limit when it changes, else the ones the request has
local want = m
if tonumber(ARGV[3]) then want = nc end
local nm = math.max(m, want)
redis.call('HSET', KEYS[3], rid, req_value(np, nc, want, s, g))
if s == 's' then return {p, c} end -- scheduled: tokens are made when it is promoted

local added = 0
for k = 1, nm do
  local token = rid .. '#' .. k
  local score = tonumber(redis.call('ZSCORE', KEYS[1], token))
  if k > want then
    redis.call('ZREM', KEYS[1], token)
    redis.call('ZREM', KEYS[5], token)
  elseif score then
    if np ~= p then redis.call('ZADD', KEYS[1], token_score(KEYS[2], np), token) end
  elseif redis.call('HEXISTS', KEYS[4], token) == 0 and not redis.call('ZSCORE', KEYS[5], token) then
    redis.call('ZADD', KEYS[1], token_score(KEYS[2], np), token)
    added = added + 1
  end
end
wake(KEYS[6], added)
return {p, c}
