--[[
  Taking items for tokens a worker holds, for the request at R[1..5]
  (_request.lua): the body of take-5, and of take_lean, which takes for
  many one-item requests of one queue's slot in one call. See take-5 for
  the arguments and the answer. `at` is the time in ms when the caller has
  read it already (a take of many requests reads it once), else nil.
  `packed` is true when the request is likely a packed one-item request
  (take_lean, submit_one).
]]
-- a take's meta fields: those of every request, then (11-15) those of a packed one (_request.lua)
local TAKE_FIELDS = {'processor', 'dedup_key', 'time_limit', 'priority', 'lean', 'concurrency', 'rate_limit', 'state',
                     'expires_at', 'started_at', 'p', 'created_at', 'q', 'c', 'f'}

-- Every meta field a take reads. A field a hash lacks costs HMGET a scan of
-- all of a small hash's fields: a many-item request's meta (about 25) is read
-- without the packed fields it never has, and only a meta that may hold its
-- payload packed (no state, or lean) is read for them; one likely packed is
-- read for all in one call.
local function take_fields(meta, packed)
  if packed then
    return redis.call('HMGET', meta, unpack(TAKE_FIELDS))
  end
  local info = redis.call('HMGET', meta, unpack(TAKE_FIELDS, 1, 10))
  if not info[8] or info[5] == '1' then
    local more = redis.call('HMGET', meta, unpack(TAKE_FIELDS, 11, 15))
    for k = 1, 5 do info[10 + k] = more[k] end
  end
  return info
end

local function take_request(worker, lease, max_attempts, retention, channel, want, guard, at, packed)
  local meta = R[1]
  local info = take_fields(meta, packed)
  local state = info[8] or (info[11] and WAITING) -- one waiting unindexed has no state field (_request.lua)
  if not state then return -1 end -- NOT_FOUND
  local short = info[13] and {info[14], info[15], info[4], info[6]} -- compact (_request.lua SHORT)
  if short then
    info[1], info[12] = info[15], info[14]
    info[4], info[6] = info[4] or COMPACT_P, info[6] or COMPACT_C
  end
  local processor, dedup, limit = info[1] or '', info[2] or '', info[3] or ''
  local priority, lean = tonumber(info[4]) or 0, (info[5] == '1' or info[11]) and 1 or 0
  local expires_at = tonumber(info[9])
  local now = at or now_ms()
  -- a packed one-item request's first take (the common case): unpacked and
  -- handed out in one write of each hash, as the steps below would leave it
  if info[11] and want == 1 and not guard and not TERMINAL[state] and max_attempts >= 1
      and not (expires_at and now >= expires_at) then
    local item = unpack_lean(meta, R[2], {info[11], info[12], info[2], info[8], info[5], info[13], short},
                             {worker, now})
    redis.call('ZADD', R[3], now + lease, item[3])
    return {0, 0, processor, dedup, limit, priority, lean, item[3], item[1], item[2], 1}
  end
  -- any other first take of a packed request: its item as unpacked, never delivered
  local unpacked = info[11] and unpack_lean(meta, R[2], {info[11], info[12], info[2], info[8], info[5], info[13], short})
  if TERMINAL[state] then return {4, 0, processor, dedup, limit, priority, lean} end
  if guard then
    local k, p = string.match(guard, '^(%d+)|(%d+)$')
    if info[7] or tonumber(k) > (tonumber(info[6]) or 0) or tonumber(p) ~= priority then
      return {5, 0, processor, dedup, limit, priority, lean}
    end
  end
  local out = {0, 0, processor, dedup, limit, priority, lean}

  local function close_item(id, idx, record, counter)
    redis.call('XACK', R[2], 'g', id)
    redis.call('ZREM', R[3], id)
    redis.call('HSET', R[4], idx, record)
    redis.call('HINCRBY', meta, counter, 1)
  end

  -- An item whose lease ran out on every attempt becomes a dead letter (closed
  -- by `close`); true if that closed the request.
  local function dead_letter(id, idx, attempts, close)
    local rec = cjson.decode(redis.call('HGET', R[4], idx) or '{}')
    rec.status = 'failed'
    rec.attempts = attempts
    if not rec.error then rec.error = 'lease expired: the worker died or stalled on every attempt' end
    rec.finished_at = now / 1000
    close(id, idx, cjson.encode(rec), 'failed')
    redis.call('ZADD', R[5], tonumber(idx), id) -- scored by item index (see ack)
    return finish_if_done(now, retention, channel)
  end

  -- What to do with tokens that got no item.
  local function leftover()
    local first = redis.call('ZRANGE', R[3], 0, 0, 'WITHSCORES')
    if #first == 2 then return 2, math.max(tonumber(first[2]), now + 1) end
    if redis.call('HGET', meta, 'finalized') ~= '1' then return 3, 0 end
    finish_if_done(now, retention, channel)
    return 4, 0
  end

  -- The request runs once an item is handed out; tokens left without an item get
  -- their instruction. Returns the script's answer.
  local function finish_take(given)
    if given > 0 and state ~= 'running' then
      if info[10] then redis.call('HSET', meta, 'state', 'running')
      else redis.call('HSET', meta, 'state', 'running', 'started_at', now) end
    end
    if given < want then
      out[1], out[2] = leftover()
    end
    return out
  end

  -- A lean request (one item in a hash, see _request.lua): the same steps for its item.
  if lean == 1 then
    local f = unpacked or redis.call('HMGET', R[2], 'i', 'p', 'e', 'd', 'c', 'h', 't')
    local idx, payload, id, d = f[1], f[2], f[3], tonumber(f[4]) or 0
    local lease_at = not unpacked and tonumber(redis.call('ZSCORE', R[3], id)) or nil
    local runnable = f[5] ~= '1' and ((d == 0 and not lease_at) or (lease_at and lease_at <= now))
    if runnable and d > 0 and not (expires_at and now >= expires_at) then
      lease_expired(idx, d, f[6], tonumber(f[7]) or lease_at, lease_at)
    end
    if expires_at and now >= expires_at then
      if runnable then lean_close(id, idx, cjson.encode({status = 'expired'}), 'expired') end
      if finish_if_done(now, retention, channel) then return {4, 0, processor, dedup, limit, priority, lean} end
      local kind, wake_at = leftover()
      return {kind, wake_at, processor, dedup, limit, priority, lean}
    end
    local given = 0
    if runnable and want >= 1 then
      if d + 1 > max_attempts then -- its lease ran out on every attempt
        if dead_letter(id, idx, d, lean_close) then
          out[1] = 4
          return out
        end
      else
        redis.call('HSET', R[2], 'h', worker, 'd', d + 1, 't', now)
        redis.call('ZADD', R[3], now + lease, id)
        out[8], out[9], out[10], out[11] = id, idx, payload, d + 1
        given = 1
      end
    end
    return finish_take(given)
  end

  -- Expired request: everything not yet run is marked expired, a batch per call.
  if expires_at and now >= expires_at then
    local expired_record = cjson.encode({status = 'expired'})
    local n = 0
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', R[3], '-inf', now, 'LIMIT', 0, 1000)) do
      local e = redis.call('XRANGE', R[2], id, id)
      if #e == 1 then close_item(id, entry_fields(e[1][2]), expired_record, 'expired'); n = n + 1 end
    end
    local fresh = redis.call('XREADGROUP', 'GROUP', 'g', worker, 'COUNT', 1000, 'STREAMS', R[2], '>')
    if fresh then
      for _, e in ipairs(fresh[1][2]) do close_item(e[1], entry_fields(e[2]), expired_record, 'expired'); n = n + 1 end
    end
    if finish_if_done(now, retention, channel) then return {4, 0, processor, dedup, limit, priority, lean} end
    if n > 0 then return {2, now, processor, dedup, limit, priority, lean} end -- more to expire: come back at once
    local kind, wake_at = leftover()
    return {kind, wake_at, processor, dedup, limit, priority, lean}
  end

  local function hand_out(id, idx, payload, attempt)
    redis.call('ZADD', R[3], now + lease, id)
    out[#out + 1] = id
    out[#out + 1] = idx
    out[#out + 1] = payload
    out[#out + 1] = attempt
  end

  local given = 0
  -- Redelivery of items whose lease ran out (or whose retry time came).
  for _ = 1, want + 100 do
    if given >= want then break end
    local due = redis.call('ZRANGEBYSCORE', R[3], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
    if #due == 0 then break end
    local id = due[1]
    local before, d, idle = pending_info(id) -- its last holder, before the claim below replaces it
    local e = redis.call('XCLAIM', R[2], 'g', worker, 0, id)[1]
    if not e or not e[2] then
      redis.call('ZREM', R[3], id) -- acknowledged or deleted meanwhile
    else
      local idx, payload = entry_fields(e[2])
      if d then lease_expired(idx, d, before, now - idle, tonumber(due[2])) end
      local _, attempt = pending_info(id)
      if attempt > max_attempts then
        if dead_letter(id, idx, attempt - 1, close_item) then
          out[1] = 4
          return out
        end
      else
        hand_out(id, idx, payload, attempt)
        given = given + 1
      end
    end
  end

  if given < want then
    local fresh = redis.call('XREADGROUP', 'GROUP', 'g', worker, 'COUNT', want - given, 'STREAMS', R[2], '>')
    if fresh then
      for _, e in ipairs(fresh[1][2]) do
        local idx, payload = entry_fields(e[2])
        hand_out(e[1], idx, payload, 1)
        given = given + 1
      end
    end
  end

  return finish_take(given)
end
