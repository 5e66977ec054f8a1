-- receive_fifo: hand out up to 10 messages of a FIFO queue, in order within
-- each group, from groups with no message in flight; lock those groups.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] inflight (zset): ids in flight, scored by visibility expiry (ms)
-- KEYS[3] messages (hash): id -> record "<sent_ms>|<payload>"
-- KEYS[4] state (hash): id -> "<token>|<receive_count>|<first_ms>|<receive_ms>"
-- KEYS[5] stats (hash): counters
-- KEYS[6] events (stream): lifecycle events
-- KEYS[7] outbox (hash): id -> message leaving for the dead-letter queue
-- KEYS[8] outbox_at (zset): outbox ids scored by when their move began (ms)
-- KEYS[9] origins (hash): id -> queue a moved message came from
-- KEYS[10] fifo (hash): id -> "<group> <seq> <sent_ms>"
-- KEYS[11] ordered (zset): "<group> <seq> <id>", score 0: each group's messages in order
-- KEYS[12] groups (hash): group -> 'r' | 'w' | messages in flight
-- KEYS[13] ready (list): groups whose head may be received (taken from the head)
-- KEYS[14] waiting (zset): groups whose head is delayed, by the head's sent_ms
-- KEYS[15] delayed (zset): ids sent while the queue had a delay, by sent_ms
-- KEYS[16] attempts (hash): receive request attempt id -> "<token> <id> <id> ..."
-- KEYS[17] attempts_at (zset): attempt ids by when they lapse (ms)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] max_messages (1-10)
-- ARGV[3] visibility_ms (0-43200000, or -1 for the queue's timeout)
-- ARGV[4] token (string, unguessable, made by the client): the receipts' secret
-- ARGV[5] queue_name (string): recorded as the origin of dead-lettered messages
-- ARGV[6] attempt_id (string, '' for none): ReceiveRequestAttemptId
--
-- A receive takes a ready group's messages from its head, as many as it may,
-- then the next ready group's. Every group it hands messages of stays locked
-- until none of them is in flight (with a timeout of 0, none ever is: the
-- groups go back to ready at once, in the order they were taken). A repeated attempt id (within 5 minutes)
-- returns the messages of its first receive still in flight under it, with
-- the same receipts and a new timeout, and receives nothing new. Work is
-- bounded: RECLAIM_MAX expiries and as many delayed groups, SKIP_MAX skipped
-- messages or empty groups per call; no loop runs over the groups.
--
-- Returns {OK, next_due_ms, recover, wait_ms, moved_n, token,
--          [id, outbox_entry] * moved_n, [id, record, receive_count, first_receive_ms, seq] * n}
-- with next_due_ms and recover as in receive.lua, token the receipts' secret
-- (an earlier one on a repeated attempt); or {E_OVER_LIMIT, next_due_ms, wait_ms}
-- | {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local inflight = KEYS[2]
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
local attempts = KEYS[16]
local attempts_at = KEYS[17]
local k = {meta = meta, fifo = fifo, ordered = ordered, groups = groups,
  ready = ready, waiting = waiting, delayed = delayed, inflight = inflight}
local now = clock(ARGV[1])
local max_messages = int_arg(ARGV[2], 1, 10)
local visibility_ms = int_arg(ARGV[3], -1, CEILING_MS)
local token = ARGV[4]
local queue_name = ARGV[5]
local attempt_id = ARGV[6]

local RECLAIM_MAX = 100  -- expiries, and groups whose delay ran out, taken back per call
local SKIP_MAX = 100
local TRIM_MAX = 100
local STALE_MOVE_MS = 30000
local ATTEMPT_MS = 300000

if max_messages == nil or visibility_ms == nil or token == '' or string.find(token, ' ') then
  return fail(E_BAD_ARGUMENT, 'bad max_messages, visibility_ms or token')
end
local settings = redis.call('HMGET', meta, 'vis_ms', 'retention_ms', 'dlq',
  'max_receives', 'inflight_limit', 'events_max', 'wait_ms', 'delay_ms', 'fifo', 'layout')
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(settings[10]) then
  return fail(E_LAYOUT, settings[10])
end
if settings[9] ~= '1' then
  return fail(E_BAD_ARGUMENT, 'not a FIFO queue')
end
if visibility_ms < 0 then
  visibility_ms = tonumber(settings[1])
end
local retention_ms = tonumber(settings[2])
local dlq = settings[3] or ''
if dlq == queue_name then
  dlq = ''  -- its own dead-letter queue (SQS accepts that): nowhere else to go, so it stays
end
local max_receives = tonumber(settings[4]) or 0
local inflight_limit = tonumber(settings[5]) or 20000
local events_max = tonumber(settings[6]) or 0
local wait_ms = tonumber(settings[7]) or 0
local delay_ms = tonumber(settings[8]) or 0

local function next_due(include_delayed)
  local delay_due = nil
  if include_delayed then
    local w = redis.call('ZRANGE', k.waiting, 0, 0, 'WITHSCORES')
    if w[2] then
      delay_due = tonumber(w[2]) + delay_ms
    end
  end
  return ms_until_due(inflight, now, delay_due)
end

local function seq_of(info)
  local _, seq = parse_fifo(info or '- 0 0')
  return seq or ''
end

-- Attempt ids that lapsed: a few per call.
local lapsed = redis.call('ZRANGEBYSCORE', attempts_at, '-inf', now, 'LIMIT', 0, TRIM_MAX)
if #lapsed > 0 then
  redis.call('ZREM', attempts_at, unpack(lapsed))
  redis.call('HDEL', attempts, unpack(lapsed))
end

-- A repeated attempt: the same messages, if still held under its receipts.
if attempt_id ~= '' then
  local earlier = redis.call('HGET', attempts, attempt_id)
  if earlier then
    local words = {}
    local rest = earlier
    for i = 1, 11 do
      local word, after = string.match(rest, '^(%S+) ?(.*)$')
      if word == nil then
        break
      end
      words[i] = word
      rest = after
    end
    local old_token = words[1]
    local held, held_states = {}, {}
    for i = 2, #words do
      local id = words[i]
      local current = redis.call('HGET', state, id)
      local expiry = redis.call('ZSCORE', inflight, id)
      if current and expiry and tonumber(expiry) > now then
        local held_by, receive_count, first_ms, received_ms = parse_state(current)
        if held_by == old_token then
          held[#held + 1] = id
          held_states[#held_states + 1] = {receive_count, first_ms, received_ms}
        end
      end
    end
    if #held > 0 then
      local records = redis.call('HMGET', messages, unpack(held))
      local infos = redis.call('HMGET', k.fifo, unpack(held))
      local reply = {OK, -1, 0, wait_ms, 0, old_token}
      for i = 1, #held do
        local s = held_states[i]
        local expiry = math.min(now + visibility_ms, s[3] + CEILING_MS)
        redis.call('ZADD', inflight, 'XX', expiry, held[i])
        -- The retry restarts the receipt's timeout: a change, as the event stream tells it.
        emit(events, events_max, now, 'visibility_changed', held[i], s[1], expiry - now)
        reply[#reply + 1] = held[i]
        reply[#reply + 1] = records[i]
        reply[#reply + 1] = s[1]
        reply[#reply + 1] = s[2]
        reply[#reply + 1] = seq_of(infos[i])
      end
      return reply
    end
  end
end

-- Visibility timeouts that ran out: each message is back at its place in
-- its group (it never left `ordered`), and its group unlocks with its last;
-- groups whose head's delay ran out: ready, behind those already waiting.
fifo_reclaim(k, state, stats, events, events_max, now, delay_ms, RECLAIM_MAX)

local room = inflight_limit - redis.call('ZCARD', inflight)
if room <= 0 then
  return {E_OVER_LIMIT, next_due(false), wait_ms}
end

local want = math.min(max_messages, room)
local skips = SKIP_MAX
local received = {}
local handed_groups = {}  -- groups handed out by this receive, in the order it took them
local moved = {}
local new_states = {}
local new_inflight = {}
local dropped, redelivered = 0, 0

-- Take a message out of its group and the queue (retention, dead letter).
local function take_out(id, member)
  redis.call('ZREM', k.ordered, member)
  redis.call('HDEL', k.fifo, id)
  redis.call('ZREM', k.delayed, id)
  redis.call('HDEL', messages, id)
  redis.call('HDEL', state, id)
  redis.call('HDEL', origins, id)
end

while want > 0 and skips > 0 do
  local group = redis.call('LPOP', k.ready)
  if not group then
    break
  end
  local handed = 0
  local empty = false
  local blocked_sent = nil
  local blocked_inflight = false
  if redis.call('HGET', k.groups, group) ~= 'r' then
    skips = skips - 1  -- not marked ready: listed by mistake, so skipped
  else
    local low, high = group_range(group)
    while want > 0 and skips > 0 do
      if empty or blocked_sent ~= nil or blocked_inflight then
        break
      end
      local asked = want
      local members = redis.call('ZRANGEBYLEX', k.ordered, low, high, 'LIMIT', handed, asked)
      if #members < asked then
        empty = true  -- provisional: true once every member fetched is handed out
      end
      if #members > 0 then
        local ids = {}
        for i = 1, #members do
          ids[i] = member_id(members[i])
        end
        local records = redis.call('HMGET', messages, unpack(ids))
        local states = redis.call('HMGET', state, unpack(ids))
        local infos = redis.call('HMGET', k.fifo, unpack(ids))
        local held = redis.call('ZMSCORE', inflight, unpack(ids))
        for i = 1, #ids do
          local id = ids[i]
          local record = records[i]
          local _, seq, sent = parse_fifo(infos[i] or '- 0 0')
          local receive_count, first_ms = 0, 0
          if states[i] then
            local _t
            _t, receive_count, first_ms = parse_state(states[i])
          end
          if held[i] then
            -- In flight: the group is blocked behind it (SQS's rule).
            blocked_inflight = true
            empty = false
            break
          elseif not record then
            redis.call('ZREM', k.ordered, members[i])
            redis.call('HDEL', k.fifo, id)
            skips = skips - 1
          elseif delay_ms > 0 and receive_count == 0 and sent + delay_ms > now then
            -- Still delayed: the group waits; later messages wait behind it.
            blocked_sent = sent
            empty = false
            break
          elseif now - sent_ms_of(record) >= retention_ms then
            take_out(id, members[i])
            dropped = dropped + 1
            skips = skips - 1
            emit(events, events_max, now, 'retention_expired', id, receive_count)
          elseif dlq ~= '' and max_receives > 0 and receive_count >= max_receives then
            local entry = dead_letter_out(outbox, outbox_at, now, id, token, dlq, queue_name,
              receive_count, first_ms, record)
            take_out(id, members[i])
            moved[#moved + 1] = id
            moved[#moved + 1] = entry
            skips = skips - 1
            emit(events, events_max, now, 'dead_lettered', id, receive_count)
          else
            receive_count = receive_count + 1
            if first_ms == 0 then
              first_ms = now
            end
            new_states[#new_states + 1] = id
            new_states[#new_states + 1] = format_state(token, receive_count, first_ms, now)
            new_inflight[#new_inflight + 1] = now + visibility_ms
            new_inflight[#new_inflight + 1] = id
            received[#received + 1] = id
            received[#received + 1] = record
            received[#received + 1] = receive_count
            received[#received + 1] = first_ms
            received[#received + 1] = seq
            handed = handed + 1
            want = want - 1
            if receive_count > 1 then
              redelivered = redelivered + 1
            end
            emit(events, events_max, now, 'received', id, receive_count, visibility_ms)
          end
          if skips <= 0 then
            empty = false  -- messages may be left unexamined
            break
          end
        end
      end
    end
    if handed > 0 or blocked_inflight then
      redis.call('HSET', k.groups, group, 1)  -- locked: its head is in flight now
      if handed > 0 then
        handed_groups[#handed_groups + 1] = group
      end
    elseif blocked_sent ~= nil then
      redis.call('HSET', k.groups, group, 'w')
      redis.call('ZADD', k.waiting, blocked_sent, group)
    elseif empty then
      redis.call('HDEL', k.groups, group)
    else
      -- Out of skips with the group unfinished: first in line next time.
      redis.call('LPUSH', k.ready, group)
    end
  end
end

local received_n = #received / 5
if received_n > 0 then
  redis.call('HSET', state, unpack(new_states))
  if visibility_ms > 0 then
    redis.call('ZADD', inflight, unpack(new_inflight))
  else
    -- A timeout of 0 runs out at once: the messages are visible again now, and their
    -- groups go behind the ready ones in the order this receive took them (as on SQS;
    -- left to a later reclaim, groups of equal expiry would come back in id order).
    redis.call('HINCRBY', stats, 'visibility_expired', received_n)
    for i = 1, received_n do
      emit(events, events_max, now, 'visibility_expired', received[5 * i - 4], received[5 * i - 2])
    end
    for i = 1, #handed_groups do
      fifo_release(k, handed_groups[i], now, delay_ms)
    end
  end
  local received_ids = {}
  for i = 1, received_n do
    received_ids[i] = received[5 * i - 4]
  end
  redis.call('ZREM', k.delayed, unpack(received_ids))
  if attempt_id ~= '' then
    redis.call('HSET', attempts, attempt_id, token .. ' ' .. table.concat(received_ids, ' '))
    redis.call('ZADD', attempts_at, now + ATTEMPT_MS, attempt_id)
  end
end
count_receive(stats, received_n, redelivered, dropped, #moved / 2)

local reply = {OK, -1, moves_need_recovery(outbox_at, now, STALE_MOVE_MS), wait_ms, #moved / 2, token}
if received_n == 0 then
  if skips <= 0 and redis.call('LLEN', k.ready) > 0 then
    reply[2] = 0
  else
    reply[2] = next_due(true)
  end
end
for i = 1, #moved do
  reply[#reply + 1] = moved[i]
end
for i = 1, #received do
  reply[#reply + 1] = received[i]
end
return reply
