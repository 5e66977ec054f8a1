-- get_attributes: a queue's settings, exact message counts and counters.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): ids of visible messages
-- KEYS[3] inflight (zset): ids in flight, scored by visibility expiry (ms)
-- KEYS[4] delayed (zset): ids of delayed messages, scored by due time (ms)
-- KEYS[5] messages (hash): id -> record "<sent_ms>|<payload>"
-- KEYS[6] stats (hash): counters
-- KEYS[7] outbox (hash): id -> message leaving for another queue
-- KEYS[8] fifo (hash): FIFO queues: id -> "<group> <seq> <sent_ms>"
-- KEYS[9] ordered (zset): FIFO queues: "<group> <seq> <id>", each group's messages in order
-- KEYS[10] groups (hash): FIFO queues: group -> 'r' | 'w' | messages in flight
-- KEYS[11] ready (list): FIFO queues: groups whose head may be received
-- KEYS[12] waiting (zset): FIFO queues: groups whose head is delayed, by its sent_ms
-- KEYS[13] tenants (hash): fair queues: group -> its messages in flight
-- KEYS[14] deferred (zset): fair queues: "<group> <seq> <entry>", noisy groups' messages set aside
-- KEYS[15] noisy (zset): fair queues: groups with messages set aside, by their messages in flight
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
--
-- Messages whose timeout or delay has run out but that no receive has
-- moved yet are counted where they now belong (visible).
--
-- On a FIFO queue, delayed counts messages sent while the queue had a delay
-- and not received since; the oldest message is looked for among the heads
-- of the first groups ready and waiting (OLDEST_PROBE of each).
--
-- Returns {OK, now_ms, meta (flat field, value list), stats (flat list),
--          visible, in_flight, delayed, moving, oldest_sent_ms (-1: none),
--          groups, groups_in_flight, noisy_groups, visible_quiet, in_flight_quiet,
--          oldest_quiet_sent_ms}
-- (groups and groups_in_flight 0 on a standard queue; the last three, of a fair
-- queue: the groups noisy now, among at most NOISY_PROBE set apart, and the
-- messages visible and in flight outside them, and the oldest sent time outside them; on
-- other queues 0 and the totals).
-- or {E_QUEUE_MISSING, ''}.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local delayed = KEYS[4]
local messages = KEYS[5]
local stats = KEYS[6]
local outbox = KEYS[7]
local fifo = KEYS[8]
local ordered = KEYS[9]
local groups = KEYS[10]
local ready = KEYS[11]
local waiting = KEYS[12]
local tenants = KEYS[13]
local deferred = KEYS[14]
local noisy = KEYS[15]
local NOISY_PROBE = 32
local now = clock(ARGV[1])

local OLDEST_PROBE = 10

local settings = redis.call('HGETALL', meta)
if #settings == 0 then
  return fail(E_QUEUE_MISSING)
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local expired = redis.call('ZCOUNT', inflight, '-inf', now)
local inflight_n = redis.call('ZCARD', inflight) - expired
local first_expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, 1)

if redis.call('HGET', meta, 'fifo') == '1' then
  local delay_ms = tonumber(redis.call('HGET', meta, 'delay_ms')) or 0
  local delayed_n = 0
  if delay_ms > 0 then
    delayed_n = redis.call('ZCOUNT', delayed, '(' .. (now - delay_ms), '+inf')
  end
  local visible_n = redis.call('HLEN', messages) - inflight_n - delayed_n
  local groups_n = redis.call('HLEN', groups)
  local locked_n = groups_n - redis.call('LLEN', ready) - redis.call('ZCARD', waiting)
  local candidates = {}
  local heads = redis.call('LRANGE', ready, 0, OLDEST_PROBE - 1)
  local waiting_heads = redis.call('ZRANGE', waiting, 0, OLDEST_PROBE - 1)
  for i = 1, #waiting_heads do
    heads[#heads + 1] = waiting_heads[i]
  end
  for i = 1, #heads do
    local low, high = group_range(heads[i])
    local head = redis.call('ZRANGEBYLEX', ordered, low, high, 'LIMIT', 0, 1)
    if head[1] then
      candidates[#candidates + 1] = member_id(head[1])
    end
  end
  candidates[#candidates + 1] = first_expired[1]
  local oldest = -1
  if #candidates > 0 then
    local infos = redis.call('HMGET', fifo, unpack(candidates))
    for i = 1, #infos do
      if infos[i] then
        local _, _, sent = parse_fifo(infos[i])
        if oldest < 0 or sent < oldest then
          oldest = sent
        end
      end
    end
  end
  return {OK, now, settings, redis.call('HGETALL', stats), visible_n, inflight_n,
    delayed_n, redis.call('HLEN', outbox), oldest, groups_n, locked_n}
end

local ghosts = tonumber(redis.call('HGET', meta, 'ghosts')) or 0
local due = redis.call('ZCOUNT', delayed, '-inf', now)
local visible_n = redis.call('LLEN', visible) - ghosts + expired + due
local delayed_n = redis.call('ZCARD', delayed) - due
-- Fair queues: messages set aside are visible too; noisy groups' messages are not quiet.
local noisy_n, visible_quiet, inflight_quiet = 0, visible_n, inflight_n
local set_apart = {}
if redis.call('HGET', meta, 'fair') == '1' then
  visible_n = visible_n + redis.call('ZCARD', deferred)
  set_apart = redis.call('ZRANGE', noisy, 0, NOISY_PROBE - 1, 'WITHSCORES')
  for i = 1, #set_apart, 2 do
    local held = tonumber(set_apart[i + 1])
    if is_noisy(held, inflight_n) then
      noisy_n = noisy_n + 1
      inflight_quiet = inflight_quiet - held
    end
  end
end

-- The oldest message waiting: the head of the list holds the oldest
-- sends; run-out timeouts and delays may be older still.
local oldest = -1
local candidates = {}
-- A visible entry: its sent time when its record is inline, else its id to look up.
local function consider(entry)
  local id, record = split_entry(entry)
  if record then
    local sent = sent_ms_of(record)
    if oldest < 0 or sent < oldest then
      oldest = sent
    end
  else
    candidates[#candidates + 1] = id
  end
end
local heads = redis.call('LRANGE', visible, 0, OLDEST_PROBE - 1)
for i = 1, #heads do
  consider(heads[i])
end
local first_due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, 1)
candidates[#candidates + 1] = first_due[1]
if first_expired[1] then
  candidates[#candidates + 1] = (split_member(first_expired[1]))
end
local function oldest_of(ids)
  if #ids > 0 then
    local records = redis.call('HMGET', messages, unpack(ids))
    for i = 1, #records do
      if records[i] then
        local sent = sent_ms_of(records[i])
        if oldest < 0 or sent < oldest then
          oldest = sent
        end
      end
    end
  end
end
oldest_of(candidates)
-- Fair queues: so far outside the groups set apart; then the first message set aside of each
-- group set apart (at most OLDEST_PROBE of them).
local oldest_quiet = oldest
candidates = {}
for i = 1, #set_apart, 2 do
  if i > 2 * OLDEST_PROBE then
    break
  end
  local low, high = group_range(set_apart[i])
  local first = redis.call('ZRANGEBYLEX', deferred, low, high, 'LIMIT', 0, 1)
  if first[1] then
    consider(deferred_entry(first[1]))
  end
end
oldest_of(candidates)

return {OK, now, settings, redis.call('HGETALL', stats), visible_n, inflight_n,
  delayed_n, redis.call('HLEN', outbox), oldest, 0, 0, noisy_n, visible_quiet, math.max(inflight_quiet, 0),
  oldest_quiet}
