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

-- reqs hash value "priority|concurrency|max_token|state" (state q=queued, s=scheduled),
-- followed by "|group" for a request of a group (g: nil for none)
local function parse_req(v)
  if not v then return nil end
  local p, c, m, s, g = string.match(v, '^(%d+)|(%d+)|(%d+)|(%a)|?(.*)$')
  if g == '' then g = nil end
  return tonumber(p), tonumber(c), tonumber(m), s, g
end

--[[
  A waiting one-item request that submit_one made packed (docs/keys.md) has
  no reqs entry and no index entry: its one token, rid#1, waiting in tokens
  in the band of its priority, stands for it, and the queue's `packed` hash
  counts it under that band (count_packed), so that the dashboard knows the
  depth without an entry per request. The script that first claims it
  or retires it acts as if its entry were "p|1|1|q" (the claim step writes
  that entry then, and counts it out); a change of priority moves its token
  and its count. Only an id made in its queue's slot (HEXID-TAG,
  core/engine/store/keys.py) can be one: packable(rid).
  waiting_packed(tokens, rid): its priority while it waits so, else nil;
  call it only when reqs has no entry.
]]
local function band_priority(score)
  return 99 - math.floor(tonumber(score) / BAND)
end

local function packable(rid)
  return string.find(rid, '^%x+%-%w+$') ~= nil
end

local function waiting_packed(tokens_key, rid)
  if not packable(rid) then return nil end
  local score = redis.call('ZSCORE', tokens_key, rid .. '#1')
  return score and band_priority(score) or nil
end

-- n more (or fewer) requests waiting packed in band p of the `packed` hash; a band at 0 goes,
-- and one never drops below 0 (a request packed by a release before this count is counted out too)
local function count_packed(key, p, n)
  if tonumber(redis.call('HINCRBY', key, p, n)) <= 0 then redis.call('HDEL', key, p) end
end

--[[
  Lanes (docs/keys.md). A one-item request that would wait packed at
  LANE_P, with no de-dup key, may wait in its queue's lane instead of
  holding a token: a LIST of "seq|rid", seq from the token order counter, so
  the lane is in claim order. It is counted in `packed` under LANE_P as if it
  held its token rid#1 at the score lane_entry gives, and the claim step (cycle-18)
  takes the lane's head and the tokens in order of those scores. A lane
  request that waits no more (cancelled, moved to a token) leaves the lane
  at once when it is the head (lane_drop), else its id goes into the
  queue's tombstone SET, which the claim reads when the id comes to the
  head; the SET goes when the lane empties.
]]
local LANE_P = 50

-- "seq|rid" -> its score as a token of band LANE_P, rid
local function lane_entry(line)
  local seq, rid = string.match(line, '^(%d+)|(.*)$')
  return (99 - LANE_P) * BAND + tonumber(seq), rid
end

local function lane_drop(lane_key, tomb_key, rid)
  local head = redis.call('LINDEX', lane_key, 0)
  if head and select(2, lane_entry(head)) == rid then
    redis.call('LPOP', lane_key)
    if redis.call('LLEN', lane_key) == 0 then redis.call('DEL', tomb_key) end
  else
    redis.call('SADD', tomb_key, rid)
  end
end

-- a request is live (registered) in its queue: its reqs entry, or its token while it waits packed
local function is_live(reqs_key, tokens_key, rid)
  return redis.call('HEXISTS', reqs_key, rid) == 1 or waiting_packed(tokens_key, rid) ~= nil
end

local function req_value(p, c, m, s, g)
  if g then return p .. '|' .. c .. '|' .. m .. '|' .. s .. '|' .. g end
  return p .. '|' .. c .. '|' .. m .. '|' .. s
end

-- Fair turns between groups (start-time fair queueing): the sequence after
-- which group g's next tokens go in priority band p, the later of the last
-- sequence given to the group (groups hash, s:<g>) and the queue's virtual
-- time, the sequence of the band's head (the token claimed next; the order
-- counter when the band is empty). A group with many tokens has them spaced
-- one apart from near the head; a group with one gets a place right behind
-- the head. Call group_seqs(tokens, seq, groups, g, p, n) for n new places:
-- it records them and returns the first minus one.
local function group_seqs(tokens_key, seq_key, groups_key, g, p, n)
  local lo = (99 - p) * BAND
  local head = redis.call('ZRANGEBYSCORE', tokens_key, fmt(lo), '(' .. fmt(lo + BAND), 'WITHSCORES', 'LIMIT', 0, 1)
  local counter = tonumber(redis.call('GET', seq_key)) or 0
  local vt = counter
  if #head == 2 then vt = tonumber(head[2]) - lo end
  local base = math.max(vt, tonumber(redis.call('HGET', groups_key, 's:' .. g)) or 0)
  redis.call('HSET', groups_key, 's:' .. g, base + n)
  -- ungrouped tokens made later go after these (FIFO, as without groups)
  if counter < base + n then redis.call('SET', seq_key, base + n) end
  return base
end

-- The same for many tokens in one call (cycle-18's returns): the band heads,
-- the counter and each group's last sequence are read once into `memo`
-- (heads as found before the first of these tokens went back), and written
-- back by group_seqs_flush(memo, seq, groups) at the end.
local function group_seqs_memo(memo, tokens_key, seq_key, groups_key, g, p)
  if not memo.counter then
    memo.counter = tonumber(redis.call('GET', seq_key)) or 0
    memo.top, memo.heads, memo.last, memo.dirty = memo.counter, {}, {}, {}
  end
  local vt = memo.heads[p]
  if not vt then
    local lo = (99 - p) * BAND
    local head = redis.call('ZRANGEBYSCORE', tokens_key, fmt(lo), '(' .. fmt(lo + BAND), 'WITHSCORES', 'LIMIT', 0, 1)
    vt = #head == 2 and tonumber(head[2]) - lo or memo.counter
    memo.heads[p] = vt
  end
  local last = memo.last[g]
  if not last then last = tonumber(redis.call('HGET', groups_key, 's:' .. g)) or 0 end
  local x = math.max(vt, last) + 1
  memo.last[g], memo.dirty[g] = x, true
  if x > memo.top then memo.top = x end
  return x
end

local function group_seqs_flush(memo, seq_key, groups_key)
  if not memo.counter then return end
  local fields = {}
  for g in pairs(memo.dirty) do
    fields[#fields + 1] = 's:' .. g
    fields[#fields + 1] = memo.last[g]
  end
  if #fields > 0 then redis.call('HSET', groups_key, unpack(fields)) end
  if memo.top > memo.counter then redis.call('SET', seq_key, memo.top) end
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

-- Handoffs (submit_one-21) are JSON arrays on the wake list: [worker, request
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
