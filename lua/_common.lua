--[[
  Shared helpers, spliced into a script by an include line naming this file.
  Not a script of its own (the leading underscore keeps it out of the registry).
]]
local BAND = 17592186044416 -- 2^44: width of one priority band in token scores

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n)
  return string.format('%.0f', n)
end

-- "rid#k" -> rid, k
local function parse_token(token)
  local rid, k = string.match(token, '^(.*)#(%d+)$')
  return rid, tonumber(k)
end

-- reqs hash value "priority|concurrency|max_token|state" (state q=queued, s=scheduled)
local function parse_req(v)
  if not v then return nil end
  local p, c, m, s = string.match(v, '^(%d+)|(%d+)|(%d+)|(%a)$')
  return tonumber(p), tonumber(c), tonumber(m), s
end

local function req_value(p, c, m, s)
  return p .. '|' .. c .. '|' .. m .. '|' .. s
end

local function token_score(seq_key, priority)
  local seq = redis.call('INCR', seq_key)
  return fmt((99 - priority) * BAND + seq)
end

-- Push up to n wake markers, keeping the list short when nobody waits on it.
-- A marker is "1", or the id of a one-item request in the queue's slot, which
-- the worker it wakes may take in the round trip that claims its token.
local function wake(wake_key, n, marker)
  local room = 64 - redis.call('LLEN', wake_key)
  if n > room then n = room end
  for _ = 1, n do redis.call('RPUSH', wake_key, marker or 1) end
end

-- A worker at rest blocks on the wake list for less than this (handoff.py);
-- an older rest is a dead worker's.
local REST_MS = 2000

-- Handoffs (submit_one-18) are JSON arrays on the wake list: [worker, request
-- id, take answer, rest began]. Remove those made for `worker` and return them.
local function take_handoffs(wake_key, worker)
  local out = {}
  for _, v in ipairs(redis.call('LRANGE', wake_key, 0, -1)) do
    if string.sub(v, 1, 1) == '[' and cjson.decode(v)[1] == worker then
      redis.call('LREM', wake_key, 1, v)
      out[#out + 1] = v
    end
  end
  return out
end

-- Clear a wake list's markers (nothing is left to wake for), keeping handoffs.
local function clear_markers(wake_key)
  if redis.call('LLEN', wake_key) == 0 then return end
  local keep = {}
  for _, v in ipairs(redis.call('LRANGE', wake_key, 0, -1)) do
    if string.sub(v, 1, 1) == '[' then keep[#keep + 1] = v end
  end
  redis.call('DEL', wake_key)
  if #keep > 0 then redis.call('RPUSH', wake_key, unpack(keep)) end
end
