--[[
  Shared helpers for the request-slot scripts, spliced in by an include line.
  They work on R[1..5] = meta, items, leases, results, dead of one request:
  KEYS, unless a script that serves several requests (of one slot) points R
  at each one's keys in turn.
]]
local R = KEYS
local TERMINAL = {completed = true, failed = true, cancelled = true, expired = true}

local function counts(meta)
  local v = redis.call('HMGET', meta, 'total', 'done', 'failed', 'expired', 'finalized', 'state', 'dedup_key')
  return tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0, v[5] == '1', v[6], v[7]
end

-- the meta fields an event carries, in the order announce reads them
local EVENT_FIELDS = {'id', 'queue', 'state', 'total', 'done', 'failed', 'expired', 'priority', 'concurrency'}

-- An event of kind `kind` from v, the values of EVENT_FIELDS.
local function announce(channel, kind, v, now)
  redis.call('PUBLISH', channel, cjson.encode({
    type = kind, id = v[1], queue = v[2], state = v[3], total = tonumber(v[4]) or 0,
    done = tonumber(v[5]) or 0, failed = tonumber(v[6]) or 0, expired = tonumber(v[7]) or 0,
    priority = tonumber(v[8]) or 0, concurrency = tonumber(v[9]) or 0, t = now}))
end

local function publish(meta, channel, now, kind)
  if channel == '' then return end
  local v = redis.call('HMGET', meta, unpack(EVENT_FIELDS))
  redis.call('HSET', meta, 'pub', now)
  announce(channel, kind, v, now)
end

-- Progress messages are coalesced to one per 50 ms per request.
local function publish_progress(meta, channel, now)
  local last = tonumber(redis.call('HGET', meta, 'pub')) or 0
  if now - last >= 50 then publish(meta, channel, now, 'progress') end
end

local function expire_all(retention_ms)
  for i = 1, 5 do redis.call('PEXPIRE', R[i], retention_ms) end
end

local function final_state(failed, expired)
  if failed > 0 then return 'failed' elseif expired > 0 then return 'expired' end
  return 'completed'
end

-- Close the request when every item has an outcome; true if it closed now,
-- then its state and de-dup key.
local function finish_if_done(now, retention_ms, channel)
  local total, done, failed, expired, finalized, state, dedup = counts(R[1])
  if TERMINAL[state] or not finalized or done + failed + expired < total then return false, state, dedup end
  local final = final_state(failed, expired)
  redis.call('HSET', R[1], 'state', final, 'finished_at', now)
  expire_all(retention_ms)
  publish(R[1], channel, now, 'finished')
  return true, final, dedup
end

-- finish_if_done for a lean request (total 1, finalized) whose one item is
-- done now, counter included, in one read and one write of the meta: the
-- common close of the drain. Its leases and dead letters have no key left to
-- expire (the item's lease is gone; a retried dead letter left the dead set).
-- False, with nothing written, when the request is closed already (cancelled).
local function finish_lean_done(now, retention_ms, channel)
  local v = redis.call('HMGET', R[1], 'dedup_key', unpack(EVENT_FIELDS))
  local dedup = table.remove(v, 1) or ''
  if TERMINAL[v[3]] then return false end
  local done = (tonumber(v[5]) or 0) + 1
  local final = final_state(tonumber(v[6]) or 0, tonumber(v[7]) or 0)
  redis.call('HSET', R[1], 'done', done, 'state', final, 'finished_at', now)
  for _, k in ipairs({R[1], R[2], R[4]}) do redis.call('PEXPIRE', k, retention_ms) end
  if channel ~= '' then
    v[3], v[5] = final, done
    announce(channel, 'finished', v, now)
  end
  return true, final, dedup
end

-- Entry fields {i, idx, p, payload} -> idx, payload
local function entry_fields(fields)
  local idx, payload
  for j = 1, #fields, 2 do
    if fields[j] == 'i' then idx = fields[j + 1] elseif fields[j] == 'p' then payload = fields[j + 1] end
  end
  return idx, payload
end

local function pending_info(id)
  local p = redis.call('XPENDING', R[2], 'g', id, id, 1)
  if #p == 0 then return nil end
  return p[1][2], tonumber(p[1][4]), tonumber(p[1][3]) -- consumer, delivery count, ms since delivered
end

--[[
  An item's attempts (core/engine/attempts.py): JSON lines in its request's
  results hash under 'a:<index>', the last ATTEMPTS_KEPT of them, each
  {"n": attempt, "w": worker, "t": taken (ms), "r": ran for (ms), "o":
  outcome, "y": why}. A worker writes one for each attempt that did not end
  done (a done attempt is its result record); a take writes one for an
  attempt whose lease ran out without an outcome. In the results hash, they
  expire and are kept exactly as the item's result is.
]]
local ATTEMPTS_KEPT = 10

local function add_attempt(idx, line)
  local field = 'a:' .. idx
  local old = redis.call('HGET', R[4], field)
  if old then
    line = old .. '\n' .. line
    local _, n = string.gsub(line, '\n', '')
    if n >= ATTEMPTS_KEPT then line = string.sub(line, string.find(line, '\n', 1, true) + 1) end
  end
  redis.call('HSET', R[4], field, line)
end

-- The attempt number of the item's last recorded attempt (0: none).
local function last_attempt(idx)
  local lines = redis.call('HGET', R[4], 'a:' .. idx)
  return lines and tonumber(string.match(lines, '"n":(%d+)[^\n]*$')) or 0
end

-- Attempt `n`, taken by `worker` at `taken` (ms), got no outcome before its
-- lease ran out at `ended` (ms): recorded unless it has its record already.
local function lease_expired(idx, n, worker, taken, ended)
  if n < 1 or last_attempt(idx) == n then return end
  add_attempt(idx, cjson.encode({n = n, w = worker or '', t = taken, r = math.max(0, ended - taken),
                                 o = 'lease-expired'}))
end

--[[
  A lean request (one item, created finalized: create-2 chooses it) keeps its
  item in a small HASH at the items key instead of a stream with a consumer
  group: i (index 0), p (payload), e (entry id, "created_ms-0"), d (deliveries
  so far), h (the worker holding it, while delivered and not closed), t (its
  last delivery, ms), c ("1" once it has an outcome). Its leases, results and dead letters are the same
  structures as a stream item's, under its entry id.
]]
--[[
  A one-item request made by submit_one waits packed (docs/keys.md): its meta
  hash alone holds it, with the payload in field p, and leaves out what every
  such request has at first (id, total 1, finalized 1, zero counters, an empty
  de-dup key); its items hash does not exist yet. One that waits unindexed
  leaves out `lean` and `state` too (create_packed): its state is WAITING.
  Such a one may be compact besides (its field q says so): the names of
  SHORT, and no priority or concurrency while they are COMPACT_P and
  COMPACT_C. The first script that takes
  or cancels it calls unpack_lean, which makes both as a lean request has
  them, with the full names; readers in Python expand it the same way
  (core/engine/store/packed.py).
  `known` is {payload, created_at, dedup_key, state, lean, q, {c, f, priority,
  concurrency}} of the meta when the caller has read them already (a take),
  else nil; returns the item's hash fields
  as HMGET i, p, e, d would (nil if it was not packed). A take that hands
  the item out at once passes `deliver` = {worker, now}: the item is written
  delivered (d 1, h, t) and the request running, in the same two writes.
]]
local WAITING = 'queued' -- the state of a packed request whose meta has none
-- The compact layout's names (store/packed.py SHORT), and what it implies when a field is absent:
-- a compact meta holds a few fields of a few bytes each, so that a waiting job costs under 200 B.
local SHORT = {created_at = 'c', queue = 'q', processor = 'f'}
local COMPACT_P, COMPACT_C = '50', '10' -- LANE_P, QueueConfig's default concurrency

-- The fields a compact meta's unpacking writes: c, q, f by their full names,
-- and the priority and concurrency it implied. `s` is {c, f, priority, concurrency}.
local function full_names(fields, q, s)
  for _, v in ipairs({'created_at', s[1], 'queue', q, 'processor', s[2]}) do fields[#fields + 1] = v end
  if not s[3] then fields[#fields + 1] = 'priority'; fields[#fields + 1] = COMPACT_P end
  if not s[4] then fields[#fields + 1] = 'concurrency'; fields[#fields + 1] = COMPACT_C end
end

-- the state of a request, from its meta (nil: there is no such request)
local function state_of(meta)
  local f = redis.call('HMGET', meta, 'state', 'p')
  return f[1] or (f[2] and WAITING)
end

local function unpack_lean(meta, items, known, deliver)
  local f = known or redis.call('HMGET', meta, 'p', 'created_at', 'dedup_key', 'state', 'lean', 'q')
  if not f[1] then return nil end
  local short = f[6] and (f[7] or redis.call('HMGET', meta, 'c', 'f', 'priority', 'concurrency'))
  local created = short and short[1] or f[2]
  local item = {'0', f[1], created .. '-0', deliver and '1' or '0'}
  local fields = {'id', string.match(meta, ':([^:]+):meta$'), 'finalized', 1, 'done', 0, 'failed', 0, 'expired', 0,
                  'total', 1}
  if short then full_names(fields, f[6], short) end
  if not f[3] then fields[#fields + 1] = 'dedup_key'; fields[#fields + 1] = '' end
  if not f[5] then fields[#fields + 1] = 'lean'; fields[#fields + 1] = 1 end
  if not f[4] and not deliver then fields[#fields + 1] = 'state'; fields[#fields + 1] = WAITING end
  if deliver then
    redis.call('HSET', items, 'i', item[1], 'p', item[2], 'e', item[3], 'd', item[4], 'h', deliver[1], 't', deliver[2])
    for _, v in ipairs({'state', 'running', 'started_at', deliver[2]}) do fields[#fields + 1] = v end
  else
    redis.call('HSET', items, 'i', item[1], 'p', item[2], 'e', item[3], 'd', item[4])
  end
  if short then redis.call('HDEL', meta, 'p', 'c', 'q', 'f') else redis.call('HDEL', meta, 'p') end
  redis.call('HSET', meta, unpack(fields))
  return item
end

-- Cancel the request at R[1..5] (cancel-5 and cancel_one-18): items not yet
-- started never run, a packed one is unpacked so that its item reads as one
-- that never ran. Returns cancel-5's answer.
local function cancel_request(retention_ms, channel)
  local state = state_of(R[1])
  if not state then return -1 end -- NOT_FOUND
  if TERMINAL[state] then return -2 end -- FINISHED
  local now = now_ms()
  local unindexed = redis.call('HEXISTS', R[1], 'state') == 0
  unpack_lean(R[1], R[2])
  redis.call('HSET', R[1], 'state', 'cancelled', 'finished_at', now)
  expire_all(retention_ms)
  publish(R[1], channel, now, 'finished')
  return unindexed and 2 or 1
end

local function is_lean(items)
  return redis.call('TYPE', items)['ok'] == 'hash'
end

-- close a lean item with an outcome record (and a counter to add to, or nil)
local function lean_close(id, idx, record, counter)
  redis.call('HDEL', R[2], 'h')
  redis.call('HSET', R[2], 'c', 1)
  redis.call('ZREM', R[3], id)
  redis.call('HSET', R[4], idx, record)
  if counter then redis.call('HINCRBY', R[1], counter, 1) end
end
