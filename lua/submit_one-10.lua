--[[
  Submit a request of one item in one call: refuse a duplicate (creating
  nothing), else create it lean (create-2) in its queue's slot and register
  it (enqueue-8), with its id as the wake marker. Its id carries the queue's
  slot tag (core/engine/keys.py).

  Input:
    KEYS[1] meta     HASH of the request
    KEYS[2] items    HASH of its one item
    KEYS[3] tokens   ZSET the queue's waiting tokens
    KEYS[4] seq      STRING token order counter
    KEYS[5] reqs     HASH active requests
    KEYS[6] wake     LIST wake markers
    KEYS[7] dedup    HASH de-dup key -> request id
    KEYS[8] sched    ZSET scheduled request ids by ready time
    KEYS[9] index    ZSET live request ids by creation time
    KEYS[10] rate    HASH rate limits
    ARGV[1] request id
    ARGV[2] priority (0-99)
    ARGV[3] concurrency limit (>= 1)
    ARGV[4] de-dup key ("" for none)
    ARGV[5] delay in ms (0 = now)
    ARGV[6] expires in ms from now (0 = never)
    ARGV[7] "1" if the ready time is kept in a schedule shard (as enqueue-8)
    ARGV[8] the request's own rate limit, "count|window_ms|margin_ms" ("" for none)
    ARGV[9] n, the number of meta fields that follow
    ARGV[10 .. 9+2n] meta fields and values
    ARGV[10+2n] the item's payload (JSON text)

  Output:
    enqueue-8's answer: {0, id} queued, {1, id} scheduled, {2, other_id} a
    duplicate (nothing created)
    -5  a request with this id exists already
]]
--@include _common.lua
--@include _request.lua
--@include _create.lua
--@include _register.lua
if redis.call('EXISTS', KEYS[1]) == 1 then return -5 end -- EXISTS
local rid, dkey = ARGV[1], ARGV[4]
if dkey ~= '' then
  local other = redis.call('HGET', KEYS[7], dkey)
  if other and redis.call('HEXISTS', KEYS[5], other) == 1 then return {2, other} end
end
local now = now_ms()
local last = 9 + 2 * tonumber(ARGV[9])
local delay = tonumber(ARGV[5])
create_lean(meta_fields(now, 1, 1, ARGV, 10, last, delay, tonumber(ARGV[6])), ARGV[last + 1], now)
return register({KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]}, rid,
                tonumber(ARGV[2]), tonumber(ARGV[3]), dkey, delay, 1, ARGV[7] == '1', ARGV[8], rid)
