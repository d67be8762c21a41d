--[[
  Creating a request, shared by create-2 and submit_one: its meta hash's
  fields, and the hashes of a lean request (one item: see _request.lua) at
  R[1] (meta) and R[2] (items).
]]
-- A[first..last] (field, value, ...) appended to args, then the times.
local function with_fields(args, now, A, first, last, delay, exp)
  for i = first, last do args[#args + 1] = A[i] end
  if delay > 0 then args[#args + 1] = 'not_before'; args[#args + 1] = now + delay end
  if exp > 0 then args[#args + 1] = 'expires_at'; args[#args + 1] = now + exp end
  return args
end

-- The meta fields: counters, then A[first..last] (field, value, ...), then the times.
local function meta_fields(now, finalized, total, A, first, last, delay, exp)
  local args = {'created_at', now, 'finalized', finalized, 'done', 0, 'failed', 0, 'expired', 0, 'total', total}
  return with_fields(args, now, A, first, last, delay, exp)
end

-- A one-item request of submit_one, packed until taken (unpack_lean,
-- _request.lua): its creation time, the meta fields A[first..last], the
-- times, and the payload, in the meta hash alone. One that waits unindexed
-- (`bare`: no reader lists it through the index) leaves out what that
-- implies, `lean` 1 and `state` queued (WAITING in _request.lua); `compact`
-- besides, it takes the short names and leaves out what those imply.
local function create_packed(now, A, first, last, delay, exp, payload, bare, compact)
  local args = with_fields({'created_at', now}, now, A, first, last, delay, exp)
  if bare then
    local kept = {}
    for i = 1, #args - 1, 2 do
      local name, value = args[i], args[i + 1]
      if compact and ((name == 'priority' and value == COMPACT_P) or (name == 'concurrency' and value == COMPACT_C)) then
        name = nil
      elseif compact then
        name = SHORT[name] or name
      end
      if name and name ~= 'state' then kept[#kept + 1] = name; kept[#kept + 1] = value end
    end
    args = kept
  else
    args[#args + 1] = 'lean'; args[#args + 1] = 1
  end
  args[#args + 1] = 'p'; args[#args + 1] = payload
  redis.call('HSET', R[1], unpack(args))
end

local function create_lean(args, payload, now)
  args[#args + 1] = 'lean'; args[#args + 1] = 1
  redis.call('HSET', R[1], unpack(args))
  redis.call('HSET', R[2], 'i', 0, 'p', payload, 'e', fmt(now) .. '-0', 'd', 0)
end
