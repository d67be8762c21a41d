--[[
  Re-sealing the payloads of a request's item stream under the newest
  encryption key (manage.py queue_reencrypt, core/engine/features/reencrypt.py).
  Stream entries cannot be changed in place: the stream is rebuilt in a
  scratch key with the same entry ids, the re-sealed payloads, the same
  last-generated id, the same consumer groups and their pending entries
  (holder, idle time, deliveries), then renamed over the original, its expiry
  kept. Nothing happens if the stream changed since it was read.

  Input:
    KEYS[1] items    STREAM of the request
    KEYS[2] scratch  the stream being built (KEYS[1] .. ':rewrap', same slot)
    ARGV[1] the stream's length as read
    ARGV[2] its last entry id as read ("" for none)
    ARGV[3 .. ] pairs: entry id, its payload sealed under the newest key

  Output:
    1  rebuilt
    0  not a stream, or it changed since it was read (left to the next pass)
]]
if redis.call('TYPE', KEYS[1]).ok ~= 'stream' then return 0 end
if redis.call('XLEN', KEYS[1]) ~= tonumber(ARGV[1]) then return 0 end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if (last and last[1] or '') ~= ARGV[2] then return 0 end
local newp = {}
for i = 3, #ARGV, 2 do newp[ARGV[i]] = ARGV[i + 1] end
local function field(flat, name)
  for j = 1, #flat, 2 do if flat[j] == name then return flat[j + 1] end end
end
redis.call('DEL', KEYS[2])
for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
  local f = e[2]
  local p = newp[e[1]]
  if p then
    for j = 1, #f, 2 do if f[j] == 'p' then f[j + 1] = p end end
  end
  redis.call('XADD', KEYS[2], e[1], unpack(f))
end
redis.call('XSETID', KEYS[2], field(redis.call('XINFO', 'STREAM', KEYS[1]), 'last-generated-id'))
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name = field(g, 'name')
  redis.call('XGROUP', 'CREATE', KEYS[2], name, field(g, 'last-delivered-id'))
  local n = tonumber(field(g, 'pending'))
  if n > 0 then
    for _, pe in ipairs(redis.call('XPENDING', KEYS[1], name, '-', '+', n)) do
      redis.call('XCLAIM', KEYS[2], name, pe[2], 0, pe[1], 'IDLE', pe[3], 'RETRYCOUNT', pe[4], 'FORCE', 'JUSTID')
    end
  end
end
local ttl = redis.call('PTTL', KEYS[1])
redis.call('RENAME', KEYS[2], KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
