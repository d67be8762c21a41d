--[[
  One dispatch round trip of a worker: give back the tokens it is done with,
  then claim up to N waiting tokens, best priority band first and
  oldest-returned first within a band, continuing into lower bands once a
  band has no token waiting (so a lower band's token is never taken while a
  higher band's waits, and many priority levels still give full batches),
  and no more than a fair share: the tokens in play (waiting and held)
  divided by the live workers, so a request's items spread over the workers
  instead of one worker taking all its tokens. Taking a token and recording
  it as held under a lease is one atomic step, so a worker that dies right
  after loses nothing.

  Rate limits (core/engine/ratelimit.py): the queue's (config field
  rate_spec) and a request's own (rate hash) cap the claims made in any
  window; a claim under a limit is logged in ratelog. A request at its limit
  is passed over (its tokens keep their place); the queue at its limit
  claims nothing more.

  Groups (tenants): a request of a group (reqs value "...|group") counts
  against its group's concurrency limit (the tokens of the group held, in
  gheld) and rate limit (limiter g:<group>), the group's own in glimits or
  else the queue's defaults (config group_concurrency, group_rate_spec). A
  token of a group at a limit is passed over, keeping its place. A member
  of gheld whose token is no longer held (released elsewhere: tick, a dead
  worker's release) is dropped when its group is found at its limit, so the
  count stays exact. A returned token of a group goes to its group's tail
  (_common.lua group_seqs): fair turns between groups, round-robin between
  a group's requests. Ungrouped requests read none of this.

  The queue's lane (_common.lua lane_entry) is read beside the tokens: its
  head is taken when its score as a token comes first, as the token rid#1
  it stands for (a tombstoned head is dropped on the way), so the order is
  the one tokens alone would give.

  A worker that lacks some processors (core/engine/routing.py) names them:
  a request marked in needs with one of them is passed over the same way,
  left to workers that have it. Other workers pass "" and read nothing more.

  Input:
    KEYS[1] tokens      ZSET waiting tokens (score: priority band + order)
    KEYS[2] seq         STRING token order counter
    KEYS[3] reqs        HASH active requests
    KEYS[4] held        HASH token -> worker
    KEYS[5] leases      ZSET token -> lease deadline
    KEYS[6] parked      ZSET token -> wake time
    KEYS[7] wake        LIST wake markers (cleared when nothing is waiting) and handoffs
    KEYS[8] config      HASH queue settings (paused)
    KEYS[9] lastserved  HASH request id -> last claim time (for aging)
    KEYS[10] rate       HASH lim:<rid> -> a request's rate spec; n:<limiter> -> starts in its window
    KEYS[11] ratelog    ZSET <limiter>|<n> -> when that start stops counting (ms)
    KEYS[12] needs      HASH request id -> "since_ms|processor": a worker lacked its
                        processor (core/engine/routing.py); read only with ARGV[6]
    KEYS[13] groups     HASH s:<group> -> the last sequence given to a group's tokens
    KEYS[14] glimits    HASH group -> "concurrency|rate spec" (empty parts: the queue's defaults)
    KEYS[15] gheld      ZSET group .. "\31" .. token (score 0): the held tokens of each group
                        with a concurrency limit (a finished request's are dropped lazily)
    KEYS[16] packed     HASH priority -> requests waiting packed in its band (those claimed are counted
                        out, once a band)
    KEYS[17] lane       LIST "seq|rid" of one-item requests waiting in the lane (read from its head)
    KEYS[18] tomb       SET ids of lane requests that wait no more (dropped when they come to the head;
                        the SET goes when the lane empties)
    ARGV[1] worker id
    ARGV[2] lease in ms
    ARGV[3] N, the most tokens to claim (0: only give back)
    ARGV[4] "1" to record claim times in lastserved (aging is on)
    ARGV[5] live workers (for the fair share; 1 if unknown), optionally
            followed by "/S": a share of at least S tokens (a worker of fast
            items runs a batch per round trip; spread thinner, it would make
            a round trip per item)
    ARGV[6] the processors this worker lacks, each between newlines ("" for
            none, the common case: nothing is read): tokens of requests
            marked in needs with one of them are passed over, keeping their place
    ARGV[7..] releases, in threes: token, mode (return | park | drop), park-until ms

  Output:
    {wait, token...}: wait is 0, or the ms until a rate limit that held back
    a claim frees a start, or -1 when the claim got nothing and passed over
    tokens this worker lacks the processor of (ARGV[6]); then the tokens
    claimed (possibly none). Released tokens this worker no longer
    holds (its lease ran out and the token was recycled) are skipped; tokens of
    finished requests or above a lowered limit are dropped.
]]
--@include _common.lua
local worker, lease, want, aging = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local woken = 0

-- "count|window_ms|margin_ms" -> {count, window + margin}
local function parse_rate(v)
  if not v then return nil end
  local n, w, m = string.match(v, '^(%d+)|(%d+)|(%d+)$')
  if not n then return nil end
  return {n = tonumber(n), ttl = tonumber(w) + tonumber(m)}
end

-- rate limits in play: the queue's, or some request's or group's (the hash is empty otherwise)
local cfg = redis.call('HMGET', KEYS[8], 'rate_spec', 'paused', 'group_concurrency', 'group_rate_spec')
local qrate = parse_rate(cfg[1])
local limited = qrate ~= nil or redis.call('EXISTS', KEYS[10]) == 1

-- a group's limits, read once per call: {c = concurrency or nil, rate = parsed or nil, n = held count}
local gcache, gown = {}, nil -- gown: whether some group has limits of its own (read once a call)
local function glim(g)
  local l = gcache[g]
  if not l then
    if gown == nil then gown = redis.call('EXISTS', KEYS[14]) == 1 end
    local v = gown and redis.call('HGET', KEYS[14], g) or ''
    local gc, gr = string.match(v, '^(%d*)|(.*)$')
    gc = tonumber(gc) or tonumber(cfg[3])
    if gc and gc <= 0 then gc = nil end
    if gr == nil or gr == '' then gr = cfg[4] end
    l = {c = gc, rate = parse_rate(gr)}
    gcache[g] = l
  end
  return l
end
local function gfrom(g) return '[' .. g .. '\31' end
local function gto(g) return '[' .. g .. '\31\255' end

-- a batch mostly holds tokens of a few requests: read each request once
local cache = {}
local function req(rid)
  local r = cache[rid]
  if not r then
    local p, c, _, s, g = parse_req(redis.call('HGET', KEYS[3], rid))
    r = {p = p, c = c, s = s, g = g}
    if limited then r.lim = parse_rate(redis.call('HGET', KEYS[10], 'lim:' .. rid)) end
    cache[rid] = r
  end
  return r
end

-- the processor a worker lacked for this request, if one was marked (only read for a worker that lacks some)
local lacks = ARGV[6] or ''
local function lacked(r, rid)
  if r.need == nil then
    local v = redis.call('HGET', KEYS[12], rid)
    r.need = v and string.match(v, '^%d+|(.*)$') or false
  end
  return r.need and string.find(lacks, '\n' .. r.need .. '\n', 1, true) ~= nil
end

local returned, gmemo = {}, {}
for i = 7, #ARGV, 3 do
  local token, mode = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', KEYS[4], token) == worker then
    redis.call('HDEL', KEYS[4], token)
    redis.call('ZREM', KEYS[5], token)
    local rid, k = parse_token(token)
    local r = req(rid)
    if r.g then
      redis.call('ZREM', KEYS[15], r.g .. '\31' .. token)
      if gcache[r.g] and gcache[r.g].n then gcache[r.g].n = gcache[r.g].n - 1 end
    end
    if r.p and k <= r.c and mode ~= 'drop' then
      if mode == 'park' then
        redis.call('ZADD', KEYS[6], ARGV[i + 2], token)
      elseif r.g then -- to its group's tail
        local x = group_seqs_memo(gmemo, KEYS[1], KEYS[2], KEYS[13], r.g, r.p)
        redis.call('ZADD', KEYS[1], fmt((99 - r.p) * BAND + x), token)
        woken = woken + 1
      else
        returned[#returned + 1] = {token, r.p}
      end
    end
  end
end
group_seqs_flush(gmemo, KEYS[2], KEYS[13])
if #returned > 0 then -- back to the tail of their band, in the order given
  local seq = redis.call('INCRBY', KEYS[2], #returned) - #returned
  for j, t in ipairs(returned) do
    redis.call('ZADD', KEYS[1], fmt((99 - t[2]) * BAND + seq + j), t[1])
  end
  woken = woken + #returned
end

-- The lane, read a batch at a time from its head; `popped` entries are done
-- with (claimed, dropped or made tokens) and leave it at the end.
local lane, lane_at, popped, tombs, lane_out = {}, 1, 0, nil, false
local function lane_peek(n) -- the next live entry: its score, rid (nil: none)
  while true do
    if lane_at > #lane then
      if lane_out then return nil end
      n = math.max(n, 1)
      lane, lane_at = redis.call('LRANGE', KEYS[17], popped, popped + n - 1), 1
      lane_out = #lane < n -- none left past these
      if #lane == 0 then return nil end
    end
    local score, rid = lane_entry(lane[lane_at])
    if tombs == nil then tombs = redis.call('EXISTS', KEYS[18]) == 1 end
    if not (tombs and redis.call('SREM', KEYS[18], rid) == 1) then return score, rid end
    lane_at, popped = lane_at + 1, popped + 1 -- it waits no more: dropped
  end
end
local function waiting_count()
  return redis.call('ZCARD', KEYS[1]) + redis.call('LLEN', KEYS[17]) - popped
end

local claimed = {}
local live, least = string.match(ARGV[5] or '', '^(%d+)/?(%d*)$')
local workers = tonumber(live) or 1
if want > 1 and workers > 1 then -- a fair share, so other workers get tokens too
  local in_play = waiting_count() + redis.call('HLEN', KEYS[4])
  want = math.min(want, math.max(tonumber(least) or 1, math.ceil(in_play / workers)))
end
-- Rate limits: forget starts whose window has passed, then count what is left.
local held_back, passed = false, 0
local function trim_log(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[11], '-inf', now, 'LIMIT', 0, 1000)
  for _, member in ipairs(gone) do
    local field = 'n:' .. string.match(member, '^(.*)|[^|]*$')
    if redis.call('HINCRBY', KEYS[10], field, -1) <= 0 then redis.call('HDEL', KEYS[10], field) end
  end
  if #gone > 0 then redis.call('ZREMRANGEBYRANK', KEYS[11], 0, #gone - 1) end
end
local function room(rate, field)
  return rate.n - (tonumber(redis.call('HGET', KEYS[10], field)) or 0)
end
local uid, logged = nil, 0
local function log_start(rate, field, limiter, now)
  uid = uid or redis.call('INCR', KEYS[2]) -- unique across round trips of the same millisecond
  logged = logged + 1
  redis.call('ZADD', KEYS[11], now + rate.ttl, limiter .. '|' .. uid .. '.' .. logged)
  redis.call('HINCRBY', KEYS[10], field, 1)
end

-- the tokens of group g held now (its gheld members whose token is still
-- held; others, released by another path, are dropped), counted once a call
local function gheld(g, l)
  if not l.n then l.n = redis.call('ZLEXCOUNT', KEYS[15], gfrom(g), gto(g)) end
  if l.n >= l.c and not l.swept then
    l.swept = true
    for _, member in ipairs(redis.call('ZRANGEBYLEX', KEYS[15], gfrom(g), gto(g))) do
      if redis.call('HEXISTS', KEYS[4], string.sub(member, #g + 2)) == 0 then
        redis.call('ZREM', KEYS[15], member)
        l.n = l.n - 1
      end
    end
  end
  return l.n
end

if want > 0 and cfg[2] ~= '1' then
  local now = now_ms()
  if limited then
    trim_log(now)
    if qrate and room(qrate, 'n:') < want then
      want = math.max(0, room(qrate, 'n:'))
      held_back = true
    end
  end
  -- the tokens in line are read a batch at a time: a claimed token leaves the
  -- set and a passed-over one keeps its place, so the next unread one is
  -- always at rank `skipped`, as when they were read one by one
  local skipped, line, at, line_out = 0, {}, 1, false
  -- a token's score is read only to order it against the lane's head (Redis
  -- formats every score it sends: a third of a batch read's cost)
  local scored = lane_peek(want) ~= nil
  local step = scored and 2 or 1
  local out_of_band = {} -- priority -> claimed requests that waited packed there, counted out at the end
  local token, score, laned
  local function pass_over() -- the token keeps its place; a lane entry becomes a token there
    skipped = skipped + 1
    if laned then redis.call('ZADD', KEYS[1], score, token) end
  end
  for _ = 1, want + 100 + 1000 do
    if #claimed >= want or skipped > 1000 then break end
    local n = want - #claimed
    if at > #line and not line_out then
      if scored then
        line = redis.call('ZRANGE', KEYS[1], skipped, skipped + n - 1, 'WITHSCORES')
      else
        line = redis.call('ZRANGE', KEYS[1], skipped, skipped + n - 1)
      end
      at = 1
      line_out = #line < step * n -- none left past these (those passed over below go before them)
    end
    local lscore, lrid = lane_peek(n)
    laned = false
    if at <= #line and not (lscore and lscore < tonumber(line[at + 1])) then
      token, score = line[at], scored and line[at + 1]
      at = at + step
    elseif lscore then -- the lane's head comes first: taken as the token it stands for
      token, score, laned = lrid .. '#1', lscore, true
      lane_at, popped = lane_at + 1, popped + 1
    else
      break
    end
    local rid, k = parse_token(token)
    local r
    if laned then -- what a lane entry stands for is known (_common.lua lane_entry): nothing to read
      r = {p = LANE_P, c = 1, s = 'q', packed = true}
      cache[rid] = r
    else
      r = req(rid)
      if not r.p and k == 1 and packable(rid) then -- a one-item request waiting packed: its entry is made as claimed
        r.p, r.c, r.s, r.packed = band_priority(score or redis.call('ZSCORE', KEYS[1], token)), 1, 'q', true
      end
    end
    local l = r.g and glim(r.g)
    if r.lim and room(r.lim, 'n:' .. rid) <= 0 then
      pass_over() -- this request is at its rate limit: its token keeps its place
      held_back = true
    elseif l and l.rate and room(l.rate, 'n:g:' .. r.g) <= 0 then
      pass_over() -- its group is at its rate limit: the token keeps its place
      held_back = true
    elseif l and l.c and gheld(r.g, l) >= l.c then
      pass_over() -- its group is at its concurrency limit: the token keeps its place
    elseif lacks ~= '' and lacked(r, rid) then
      pass_over() -- left for a worker that has its processor, in its place
      passed = passed + 1
    else
      if not laned then redis.call('ZREM', KEYS[1], token) end
      -- a token of a finished request, or above a lowered limit, is dropped
      if r.p and k <= r.c and r.s == 'q' then
        if r.packed then
          redis.call('HSET', KEYS[3], rid, req_value(r.p, 1, 1, 'q'))
          out_of_band[r.p] = (out_of_band[r.p] or 0) + 1
        end
        redis.call('HSET', KEYS[4], token, worker)
        redis.call('ZADD', KEYS[5], now + lease, token)
        if aging then redis.call('HSET', KEYS[9], rid, now) end
        if qrate then log_start(qrate, 'n:', '', now) end
        if r.lim then log_start(r.lim, 'n:' .. rid, rid, now) end
        if l and l.c then -- counted only under a concurrency limit (stale members: see gheld)
          redis.call('ZADD', KEYS[15], 0, r.g .. '\31' .. token)
          if l.n then l.n = l.n + 1 end
        end
        if l and l.rate then log_start(l.rate, 'n:g:' .. r.g, 'g:' .. r.g, now) end
        claimed[#claimed + 1] = token
      end
    end
  end
  for p, n in pairs(out_of_band) do count_packed(KEYS[16], p, -n) end
end
if popped > 0 then
  redis.call('LTRIM', KEYS[17], popped, -1)
  if tombs and redis.call('LLEN', KEYS[17]) == 0 then redis.call('DEL', KEYS[18]) end
  popped = 0
end
-- wake idle workers only for tokens that are still waiting
local left = waiting_count()
if left == 0 then
  clear_markers(KEYS[7])
elseif woken > 0 then
  wake(KEYS[7], math.min(woken, left))
end
-- held back by a rate limit: say when the first logged start stops counting
local wait = 0
if held_back and left > 0 then
  local first = redis.call('ZRANGE', KEYS[11], 0, 0, 'WITHSCORES')
  wait = first[2] and math.max(1, tonumber(first[2]) - now_ms()) or 1
elseif passed > 0 and #claimed == 0 then
  wait = -1 -- only work this worker cannot run waits: it need not wake for this queue's markers
end
table.insert(claimed, 1, wait)
return claimed
