--[[
  Change a live request's priority and/or concurrency limit. Waiting tokens
  move to the new priority band at once; held tokens return to it when
  released; tokens above a lowered limit are removed now (or dropped when
  released); a raised limit (or a token found missing) gets fresh tokens.
  A one-item request waiting packed (waiting_packed, _common.lua) stays so:
  its token and its count move to the new band, and a concurrency limit,
  which cannot matter to one item, changes nothing here. One waiting in the
  lane (_common.lua lane_entry: no reqs entry, no token, and its meta says
  it waits) leaves it for a token of its new band when its priority changes.

  Input:
    KEYS[1] tokens  ZSET waiting tokens
    KEYS[2] seq     STRING token order counter
    KEYS[3] reqs    HASH active requests
    KEYS[4] held    HASH token -> worker
    KEYS[5] parked  ZSET token -> wake time
    KEYS[6] wake    LIST wake markers
    KEYS[7] packed  HASH priority -> requests waiting packed in its band
    KEYS[8] lane    LIST "seq|rid" of one-item requests waiting in the lane
    KEYS[9] tomb    SET ids of lane requests that wait no more
    KEYS[10] meta   HASH of the request when its id is in the queue's slot (only such a request
                    can wait packed); else any key of the queue's slot, which is not read
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
-- waiting in the lane: with no reqs entry and no token, its meta is still packed
-- (a payload and no state: the take or cancel that begins with it unpacks it)
local function in_lane()
  if not packable(rid) or redis.call('LLEN', KEYS[8]) == 0 then return false end
  local f = redis.call('HMGET', KEYS[10], 'state', 'p')
  return not f[1] and f[2] ~= false -- (a missing field reads as false)
end
if not p then -- waiting packed (waiting_packed, _common.lua), or in the lane
  p = waiting_packed(KEYS[1], rid)
  local laned = not p and in_lane()
  if laned then p = LANE_P end
  if not p then return -1 end -- NOT_FOUND
  local np = tonumber(ARGV[2]) or p
  if np ~= p then
    if laned then lane_drop(KEYS[8], KEYS[9], rid) end
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
