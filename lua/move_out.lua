-- move_out: first step of a move to other queues (redrive): take up to 100
-- visible messages out of this queue into its outbox.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): visible messages, ids or "<id>|<record>" (taken from the head)
-- KEYS[3] messages (hash): id -> record "<sent_ms>|<payload>"
-- KEYS[4] state (hash): id -> receive state
-- KEYS[5] stats (hash): counters
-- KEYS[6] events (stream): lifecycle events
-- KEYS[7] outbox (hash): id -> "<token>|<dest>|<origin>|<count>|<first_ms>|<record>"
-- KEYS[8] outbox_at (zset): outbox ids scored by when their move began (ms)
-- KEYS[9] origins (hash): id -> queue a moved message came from
-- KEYS[10] fifo (hash): FIFO queues: id -> "<group> <seq> <sent_ms>"
-- KEYS[11] ordered (zset): FIFO queues: "<group> <seq> <id>", each group's messages in order
-- KEYS[12] groups (hash): FIFO queues: group -> 'r' | 'w' | messages in flight
-- KEYS[13] ready (list): FIFO queues: groups whose head may be received
-- KEYS[14] waiting (zset): FIFO queues: groups whose head is delayed
-- KEYS[15] delayed (zset): ids of delayed messages by due time (FIFO queues: ids sent
--          while the queue had a delay, by sent_ms)
-- KEYS[16] inflight (zset): ids in flight (an id in the list may be, after a change of visibility)
-- KEYS[17] tenants (hash): fair queues: group -> its messages in flight
-- KEYS[18] group_of (hash): fair queues: id -> group, of grouped messages in flight
-- KEYS[19] noisy (zset): fair queues: groups with messages set aside, by their messages in flight
-- KEYS[20] deferred (zset): fair queues: "<group> <seq> <entry>", noisy groups' messages set aside
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] max_messages (1-100)
-- ARGV[3] token (string, unique per call): names the move, for idempotency
-- ARGV[4] destination (queue name, or '' for each message's origin)
-- ARGV[5] queue_name (string): this queue, for messages with no origin
--
-- Up to RECLAIM_MAX expired in-flight messages and due delayed ones are
-- taken back first, as receive does. A message with no destination (no
-- origin and none given) stays here.
-- A FIFO queue gives up the messages of ready groups, each group's in
-- order, from its head up to the first message that stays or is in flight;
-- groups whose head is in flight or delayed keep theirs.
-- Returns {OK, popped_n, live_n, unsourced_n, [id, outbox_entry] * moved_n}:
-- popped_n counts every id taken from the list, live_n those that were not
-- deleted, unsourced_n those that stayed for want of a destination; or
-- {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local visible = KEYS[2]
local messages = KEYS[3]
local state = KEYS[4]
local stats = KEYS[5]
local events = KEYS[6]
local outbox = KEYS[7]
local outbox_at = KEYS[8]
local origins = KEYS[9]
local fifo = KEYS[10]
local ordered = KEYS[11]
local groups = KEYS[12]
local ready = KEYS[13]
local waiting = KEYS[14]
local delayed = KEYS[15]
local inflight = KEYS[16]
local tenants = KEYS[17]
local group_of = KEYS[18]
local noisy = KEYS[19]
local deferred = KEYS[20]
local k = {meta = meta, fifo = fifo, ordered = ordered, groups = groups,
  ready = ready, waiting = waiting, delayed = delayed, inflight = inflight}
local now = clock(ARGV[1])
local max_messages = int_arg(ARGV[2], 1, 100)
local token = ARGV[3]
local destination = ARGV[4]
local queue_name = ARGV[5]

local RECLAIM_MAX = 100

if max_messages == nil or token == '' then
  return fail(E_BAD_ARGUMENT, 'bad max_messages or token')
end
local settings = redis.call('HMGET', meta, 'events_max', 'ghosts', 'fifo', 'delay_ms', 'layout', 'fair')
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(settings[5]) then
  return fail(E_LAYOUT, settings[5])
end
local events_max = tonumber(settings[1])
local delay_ms = tonumber(settings[4]) or 0

-- First, as a receive does: timeouts that ran out and delays that fell due make
-- their messages visible, so that a redrive moves them too.
if settings[3] == '1' then
  fifo_reclaim(k, state, stats, events, events_max, now, delay_ms, RECLAIM_MAX)
else
  reclaim_visible(visible, inflight, delayed, state, stats, events, events_max, now, RECLAIM_MAX,
    settings[6] == '1' and {tenants = tenants, group_of = group_of, noisy = noisy} or nil)
end

-- Into the outbox: the message leaves this queue (redriven: no receives yet).
local function take_out(id, dest, record)
  local entry = token .. '|' .. dest .. '|' .. queue_name .. '|0|0|' .. record
  redis.call('HSET', outbox, id, entry)
  redis.call('ZADD', outbox_at, now, id)
  redis.call('HDEL', messages, id)
  redis.call('HDEL', state, id)
  redis.call('HDEL', origins, id)
  emit(events, events_max, now, 'moved_out', id, 0, dest)
  return entry
end

if settings[3] == '1' then
  local reply = {OK, 0, 0, 0}
  local popped, live, unsourced = 0, 0, 0
  for round = 1, max_messages do
    if popped >= max_messages then
      break
    end
    local group = redis.call('LPOP', ready)
    if not group then
      break
    end
    if redis.call('HGET', groups, group) == 'r' then
      local low, high = group_range(group)
      local members = redis.call('ZRANGEBYLEX', ordered, low, high, 'LIMIT', 0, max_messages - popped)
      local ids = {}
      for i = 1, #members do
        ids[i] = member_id(members[i])
      end
      local records, from, held = {}, {}, {}
      if #ids > 0 then
        records = redis.call('HMGET', messages, unpack(ids))
        from = redis.call('HMGET', origins, unpack(ids))
        held = redis.call('ZMSCORE', inflight, unpack(ids))
      end
      for i = 1, #ids do
        local id = ids[i]
        local dest = destination
        if dest == '' then
          dest = from[i] or ''
        end
        if held[i] then
          break  -- in flight: it and the later messages of its group stay
        end
        popped = popped + 1
        if not records[i] then
          redis.call('ZREM', ordered, members[i])
          redis.call('HDEL', fifo, id)
        elseif dest == '' or dest == queue_name then
          live = live + 1
          if dest == '' then
            unsourced = unsourced + 1
          end
          break  -- it stays, and so do the later messages of its group
        else
          fifo_forget(k, id)
          reply[#reply + 1] = id
          reply[#reply + 1] = take_out(id, dest, records[i])
          live = live + 1
        end
      end
      fifo_schedule(k, group, now, delay_ms)
    end
  end
  reply[2] = popped
  reply[3] = live
  reply[4] = unsourced
  return reply
end

local entries = redis.call('LPOP', visible, max_messages)
if not entries and settings[6] == '1' then
  -- A fair queue's messages set aside move too, once the list is empty.
  local members = redis.call('ZRANGE', deferred, 0, max_messages - 1)
  if #members > 0 then
    redis.call('ZREM', deferred, unpack(members))
    entries = {}
    for i = 1, #members do
      entries[i] = deferred_entry(members[i])
    end
  end
end
if not entries then
  return {OK, 0, 0, 0}
end
local ids = {}
local inline_records = {}
for i = 1, #entries do
  ids[i], inline_records[i] = split_entry(entries[i])
end
local records = redis.call('HMGET', messages, unpack(ids))
for i = 1, #entries do
  if inline_records[i] then
    records[i] = inline_records[i]
  end
end
local from = redis.call('HMGET', origins, unpack(ids))
-- With ghosts, an id in the list may be in flight (hidden again): skip it.
local held = (tonumber(settings[2]) or 0) > 0 and redis.call('ZMSCORE', inflight, unpack(ids)) or {}
local reply = {OK, #ids, 0, 0}
local ghosts, kept, seen, unsourced = 0, {}, {}, 0
for i = 1, #ids do
  local id = ids[i]
  local dest = destination
  if dest == '' then
    dest = from[i] or ''
  end
  if not records[i] or held[i] or seen[id] then
    ghosts = ghosts + 1
  elseif dest == '' or dest == queue_name then
    seen[id] = true
    kept[#kept + 1] = entries[i]
    if dest == '' then
      unsourced = unsourced + 1
    end
  else
    seen[id] = true
    reply[#reply + 1] = id
    reply[#reply + 1] = take_out(id, dest, records[i])
  end
end
if #kept > 0 then
  -- Back to the tail, so the next call moves on to other messages.
  redis.call('RPUSH', visible, unpack(kept))
end
if ghosts > 0 then
  redis.call('HINCRBY', meta, 'ghosts', -ghosts)
end
reply[3] = #ids - ghosts
reply[4] = unsourced
return reply
