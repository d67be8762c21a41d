--[[
  Submit a request of one item in one call: refuse a duplicate (creating
  nothing), else create it packed (its meta hash alone, with the payload:
  unpack_lean in _request.lua) in its queue's slot and register it
  (enqueue-9), with its id as the wake marker; unless it is handed off,
  delayed, of a group or under a rate limit of its own, with no reqs entry
  and no index entry, counted in the queue's packed hash instead
  (waiting_packed in _common.lua); of those, one at LANE_P with no de-dup
  key waits in the queue's lane instead of holding a token, when the caller
  allows it (lane_entry in _common.lua). Its id carries the queue's
  slot tag (core/engine/keys.py).

  Handoff: when a worker is idle on the queue (registered by rest-2 while it
  blocks on the wake list) that says it can run the request's processor
  (KEYS[18], core/engine/routing.py) and nothing may go first (the queue is
  not paused and has no rate limit, the request has no delay or rate limit
  of its own, and no token of its priority or better waits, nor a lane entry
  when its priority is LANE_P or below), the token is
  claimed for that worker and the item taken for it (as cycle-18 and take-5
  do) here, and the wake list gets the take's answer instead of a marker:
  the worker that pops it runs the item with no round trip of its own.
  A request of a group (its meta field `group`) is never handed off: its
  token gets its group's place (_common.lua group_seqs) and a wake marker,
  so that the claim step (cycle-18) applies the group's limits.

  Input:
    KEYS[1] meta     HASH of the request
    KEYS[2] items    HASH of its one item
    KEYS[3] leases   ZSET its item's lease (take-5)
    KEYS[4] results  HASH its item's result
    KEYS[5] dead     ZSET its dead letter
    KEYS[6] tokens   ZSET the queue's waiting tokens
    KEYS[7] seq      STRING token order counter
    KEYS[8] reqs     HASH active requests
    KEYS[9] wake     LIST wake markers (and handoffs)
    KEYS[10] dedup   HASH de-dup key -> request id
    KEYS[11] sched   ZSET scheduled request ids by ready time
    KEYS[12] index   ZSET live request ids by creation time
    KEYS[13] rate    HASH rate limits
    KEYS[14] held    HASH token -> worker
    KEYS[15] leases  ZSET token -> lease deadline (the queue's)
    KEYS[16] config  HASH queue settings (paused, rate_spec)
    KEYS[17] idle    ZSET worker id -> when its rest began (ms), see rest-2
    KEYS[18] can     HASH worker id -> the processors it can run, each between newlines
    KEYS[19] groups  HASH s:<group> -> the last sequence given to a group's tokens (as enqueue-9)
    KEYS[20] packed  HASH priority -> requests waiting packed in its band (count_packed, _common.lua)
    KEYS[21] lane    LIST "seq|rid" of one-item requests waiting in the lane (lane_entry, _common.lua)
    ARGV[1] request id
    ARGV[2] priority (0-99)
    ARGV[3] concurrency limit (>= 1)
    ARGV[4] de-dup key ("" for none)
    ARGV[5] delay in ms (0 = now)
    ARGV[6] expires in ms from now (0 = never)
    ARGV[7] "1" if the ready time is kept in a schedule shard (as enqueue-9)
    ARGV[8] the request's own rate limit, "count|window_ms|margin_ms" ("" for none)
    ARGV[9] lease in ms (for a handoff, as take-5)
    ARGV[10] max attempts
    ARGV[11] retention in ms
    ARGV[12] pub/sub channel for events ("" for none)
    ARGV[13] n, the number of meta fields that follow
    ARGV[14 .. 13+2n] meta fields and values (`group`: the request's group, if it has one); with
                      no `id`, and `dedup_key` only when there is one, it waits packed (unpack_lean
                      adds them); with them, in the full lean layout with a reqs entry, which
                      workers of releases before the packed layout read
    ARGV[14+2n] the item's payload (JSON text)
    ARGV[15+2n] "1": it may wait in the lane (every worker of the queue reads lanes:
                store/packed.py PackedGate); "2": that, and waiting unindexed its meta may
                be compact (_request.lua SHORT: every worker reads that too); absent or
                else: it holds a token, and its meta has the full names

  Output:
    enqueue-9's answer: {0, id} queued (or handed off), {1, id} scheduled,
    {2, other_id} a duplicate (nothing created)
    -5  a request with this id exists already
  A handoff on the wake list is the JSON array [worker id, request id,
  take-5's answer for the request's token, when the worker's rest began].
]]
--@include _common.lua
--@include _request.lua
--@include _create.lua
--@include _register.lua
--@include _take.lua
if redis.call('EXISTS', KEYS[1]) == 1 then return -5 end -- EXISTS
local rid, dkey = ARGV[1], ARGV[4]
if dkey ~= '' then
  local other = redis.call('HGET', KEYS[10], dkey)
  if other and is_live(KEYS[8], KEYS[6], other) then return {2, other} end
end
local now = now_ms()
local last = 13 + 2 * tonumber(ARGV[13])
local delay, priority = tonumber(ARGV[5]), tonumber(ARGV[2])

-- a meta field's value
local function field(name)
  for i = 14, last - 1, 2 do
    if ARGV[i] == name then return ARGV[i + 1] end
  end
  return ''
end
local group = field('group')
if group == '' then group = nil end

-- the request's processor, among the meta fields
local function processor()
  return field('processor')
end

-- of the workers at rest, the longest at rest (Redis serves it first among the
-- blocked) that can run the request's processor, unless a rest is a dead worker's
local function capable_rest()
  local rests = redis.call('ZRANGE', KEYS[17], 0, 7, 'WITHSCORES')
  if #rests == 0 then return nil end
  if tonumber(rests[2]) < now - REST_MS then
    redis.call('ZREMRANGEBYSCORE', KEYS[17], '-inf', '(' .. fmt(now - REST_MS))
    rests = redis.call('ZRANGE', KEYS[17], 0, 7, 'WITHSCORES')
  end
  local wanted = '\n' .. processor() .. '\n'
  for j = 1, #rests, 2 do
    local can = redis.call('HGET', KEYS[18], rests[j])
    if can and string.find(can, wanted, 1, true) then return rests[j], rests[j + 1] end
  end
  return nil
end

-- the idle worker to hand the item to, if it may have it at once
local function idle_worker()
  if delay > 0 or ARGV[8] ~= '' or group then return nil end
  local worker, rested = capable_rest()
  if not worker then return nil end
  local cfg = redis.call('HMGET', KEYS[16], 'paused', 'rate_spec')
  if cfg[1] == '1' or (cfg[2] or '') ~= '' then return nil end
  local first = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
  if #first == 2 and tonumber(first[2]) < (100 - priority) * BAND then return nil end -- it would go first
  if priority <= LANE_P and redis.call('LLEN', KEYS[21]) > 0 then return nil end -- so would the lane
  return worker, rested
end

local worker, rested = idle_worker()
local marker = rid -- the wake marker; none for a handoff, which is pushed below
if worker then marker = false end
-- a caller that sends the id (one that knows of workers that cannot read packed requests:
-- store/packed.py PackedGate, or of an older release) gets the full lean layout
local full = field('id') ~= ''
-- waiting packed, it needs no reqs or index entry (waiting_packed, _common.lua): not handed off, not
-- delayed, of no group and with no rate limit of its own (the claim step reads those from reqs and rate)
local packed = not full and not worker and delay == 0 and not group and ARGV[8] == ''
local allows = ARGV[last + 2] or ''
local laned = packed and dkey == '' and priority == LANE_P and (allows == '1' or allows == '2')
if full then
  create_lean(meta_fields(now, 1, 1, ARGV, 14, last, delay, tonumber(ARGV[6])), ARGV[last + 1], now)
else
  create_packed(now, ARGV, 14, last, delay, tonumber(ARGV[6]), ARGV[last + 1], packed, allows == '2')
end
local answer = register({KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[19], KEYS[20],
                         KEYS[21]}, rid, priority, tonumber(ARGV[3]), dkey, delay, 1, ARGV[7] == '1', ARGV[8], marker,
                        group, packed, now, laned)
if worker and answer[1] == 0 then
  local token, lease = rid .. '#1', tonumber(ARGV[9])
  redis.call('ZREM', KEYS[6], token)
  redis.call('ZREM', KEYS[17], worker) -- busy from now on
  redis.call('HSET', KEYS[14], token, worker)
  redis.call('ZADD', KEYS[15], now + lease, token)
  local took = take_request(worker, lease, tonumber(ARGV[10]), tonumber(ARGV[11]), ARGV[12], 1, nil, now, true)
  redis.call('RPUSH', KEYS[9], cjson.encode({worker, rid, took, tonumber(rested)}))
end
return answer
