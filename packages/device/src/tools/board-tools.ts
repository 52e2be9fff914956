/**
 * Board-specific tool families, registered after the common tools: the desk lamp, Wi-Fi
 * reconfiguration, and the Otto robot (a two-legged servo robot whose many, well-described
 * tools make its `tools/list` span several pages). Names follow the firmware's boards;
 * descriptions are ours.
 */
import { type JsonValue, Prop } from '@xiaozhi-mcp/protocol';
import type { BoardApi, BoardHardware } from '../board-api.js';
import type { McpServer, ToolArguments } from '../mcp-server.js';

/** `self.lamp.*`: a lamp on a GPIO, its state in `hardware.lamp`. */
export function registerLampTools(server: McpServer, board: BoardApi): void {
  server.addTool(
    {
      name: 'self.lamp.get_state',
      description:
        'Tells whether the lamp is on. Returns JSON like {"power": true}. Use it when the ' +
        'user asks if the light is on.',
    },
    // The firmware returns this literal text (note the space), not a printed cJSON object.
    () => (board.hardware.lamp ? '{"power": true}' : '{"power": false}'),
  );
  server.addTool({ name: 'self.lamp.turn_on', description: 'Switches the lamp on.' }, () => {
    board.hardware.lamp = true;
    return true;
  });
  server.addTool({ name: 'self.lamp.turn_off', description: 'Switches the lamp off.' }, () => {
    board.hardware.lamp = false;
    return true;
  });
}

/** `self.system.reconfigure_wifi`: restarts into the Wi-Fi setup portal. */
export function registerWifiTools(server: McpServer, board: BoardApi): void {
  server.addTool(
    {
      name: 'self.system.reconfigure_wifi',
      description:
        'Restarts the device into Wi-Fi setup mode so the user can join it to another ' +
        'network from a phone. The device goes offline until it is configured; only use it ' +
        'when the user explicitly asks to change the Wi-Fi.',
    },
    () => {
      // On the main loop, like the firmware: the reply queued after it is usually lost.
      board.schedule(() => board.enterWifiConfigMode());
      return true;
    },
  );
}

// ---------------------------------------------------------------------------------------
// Otto robot

export const OTTO_SERVOS = [
  'left_leg',
  'right_leg',
  'left_foot',
  'right_foot',
  'left_hand',
  'right_hand',
] as const;
export type OttoServo = (typeof OTTO_SERVOS)[number];

/** Servo angles in degrees; the hands only on robots that have arms. */
export type OttoPose = { [servo: string]: number };

/** The last motion the robot ran, with the arguments it ran with. */
export type OttoAction = { [key: string]: string | number };

/**
 * What `hardware.extra.otto` holds: a plain JSON object, so a board can snapshot and restore
 * it. `pose` is the commanded angle of each servo before trims are applied.
 */
export type OttoState = {
  hands: boolean;
  pose: OttoPose;
  trims: OttoPose;
  last_action: OttoAction | null;
  action_count: number;
};

/** The resting pose: legs and feet centred, arms down. */
export const OTTO_HOME_POSE: Readonly<Record<OttoServo, number>> = {
  left_leg: 90,
  right_leg: 90,
  left_foot: 90,
  right_foot: 90,
  left_hand: 45,
  right_hand: 135,
};

/** Trims are small corrections for servo horns mounted off-centre, in degrees. */
export const OTTO_TRIM_RANGE = { min: -50, max: 50 } as const;

const OTTO_SEQUENCE_MAX_FRAMES = 30;
/** The firmware keeps trims in NVS, so they survive a reboot. */
const OTTO_TRIMS_NAMESPACE = 'otto_trims';

function servosOf(hands: boolean): readonly OttoServo[] {
  return hands ? OTTO_SERVOS : OTTO_SERVOS.slice(0, 4);
}

function homePose(hands: boolean): OttoPose {
  const pose: OttoPose = {};
  for (const servo of servosOf(hands)) pose[servo] = OTTO_HOME_POSE[servo];
  return pose;
}

/** The robot's state at power-on, for a preset's initial `hardware.extra.otto`. */
export function initialOttoState(options: { hands?: boolean } = {}): OttoState {
  const hands = options.hands ?? true;
  const trims: OttoPose = {};
  for (const servo of servosOf(hands)) trims[servo] = 0;
  return { hands, pose: homePose(hands), trims, last_action: null, action_count: 0 };
}

function isRecord(value: JsonValue | undefined): value is { [key: string]: JsonValue } {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function numbersOf(value: JsonValue | undefined, servos: readonly OttoServo[], fallback: OttoPose) {
  const out: OttoPose = {};
  for (const servo of servos) {
    const n = isRecord(value) ? value[servo] : undefined;
    out[servo] = typeof n === 'number' ? n : (fallback[servo] ?? 0);
  }
  return out;
}

/**
 * Reads `hardware.extra.otto`, repairing what is missing (a board may have restored an older
 * or hand-written snapshot), and writes the repaired state back so tools share one object.
 */
export function ottoState(hardware: BoardHardware, options: { hands?: boolean } = {}): OttoState {
  const raw = hardware.extra.otto;
  const hands =
    isRecord(raw) && typeof raw.hands === 'boolean' ? raw.hands : (options.hands ?? true);
  const initial = initialOttoState({ hands });
  const servos = servosOf(hands);
  let lastAction: OttoAction | null = null;
  if (isRecord(raw) && isRecord(raw.last_action)) {
    lastAction = {};
    for (const [key, value] of Object.entries(raw.last_action)) {
      if (typeof value === 'string' || typeof value === 'number') lastAction[key] = value;
    }
  }
  const state: OttoState = {
    hands,
    pose: numbersOf(isRecord(raw) ? raw.pose : undefined, servos, initial.pose),
    trims: numbersOf(isRecord(raw) ? raw.trims : undefined, servos, initial.trims),
    last_action: lastAction,
    action_count: isRecord(raw) && typeof raw.action_count === 'number' ? raw.action_count : 0,
  };
  hardware.extra.otto = state;
  return state;
}

// Shared properties. Speed is the duration of one step or cycle in ms: lower is faster.
const steps = (fallback = 3) => Prop.integer('steps', { default: fallback, min: 1, max: 100 });
const speed = (fallback = 1000) =>
  Prop.integer('speed', { default: fallback, min: 500, max: 1500 });
const direction = (fallback = 1) =>
  Prop.integer('direction', { default: fallback, min: -1, max: 1 });
const amount = (fallback: number, min: number, max: number) =>
  Prop.integer('amount', { default: fallback, min, max });
const armSwing = () => Prop.integer('arm_swing', { default: 50, min: 0, max: 170 });

const PARAMS_NOTE =
  '`steps` is how many times the movement repeats (1-100). `speed` is the time one cycle ' +
  'takes in milliseconds (500-1500): smaller is faster, 1000 is a relaxed pace.';

/**
 * `self.otto.*` and `self.battery.get_level`: the Otto robot's motions, trims, free servo
 * sequences and status. Motions run at once on the virtual robot and end in the home pose
 * (the firmware's action task homes after each one), except the arm poses and sequences,
 * which hold their last position. State lives in `hardware.extra.otto`; trims also in NVS.
 */
export function registerOttoTools(
  server: McpServer,
  board: BoardApi,
  options: { hands?: boolean } = {},
): void {
  const initial = ottoState(board.hardware, options);
  const servos = servosOf(initial.hands);
  // Trims saved by an earlier session win over the preset's initial state.
  const saved = board.storage.open(OTTO_TRIMS_NAMESPACE);
  for (const servo of servos) initial.trims[servo] = saved.getInt(servo, initial.trims[servo] ?? 0);

  const run = (name: string, args: ToolArguments, names: readonly string[], homeAfter = true) => {
    const state = ottoState(board.hardware);
    const action: OttoAction = { name };
    for (const key of names) action[key] = args.integer(key);
    state.last_action = action;
    state.action_count += 1;
    if (homeAfter) state.pose = homePose(state.hands);
    board.log('I', 'OttoController', `Action ${name} ${JSON.stringify(action)}`);
    return true;
  };

  const motion = (
    name: string,
    description: string,
    properties: ReturnType<typeof Prop.integer>[],
  ) => {
    const names = properties.map((p) => p.name);
    server.addTool({ name: `self.otto.${name}`, description, properties }, (args) =>
      run(name, args, names),
    );
  };

  motion(
    'walk',
    'Makes the robot walk forward or backward with its two legs. `direction` is 1 to walk ' +
      'forward and -1 to walk backward. `arm_swing` is how far the arms swing while walking, ' +
      'in degrees (0 keeps them still, up to 170). Use it for "come here", "go forward", ' +
      `"back up" and similar requests. ${PARAMS_NOTE} The robot returns to its standing ` +
      'pose when the walk ends.',
    [steps(), speed(), direction(), armSwing()],
  );
  motion(
    'turn',
    'Turns the robot on the spot by stepping in a circle. `direction` is 1 to turn left and ' +
      '-1 to turn right. `arm_swing` is how far the arms swing while turning, in degrees (0 ' +
      'to 170). About four steps make a quarter turn on a smooth floor. Use it to face the ' +
      `user or to look somewhere else. ${PARAMS_NOTE}`,
    [steps(), speed(), direction(), armSwing()],
  );
  motion(
    'jump',
    'Makes the robot do a small jump: it rises on both feet and drops back down. Good for ' +
      'showing excitement or celebrating. `steps` is the number of jumps (1-100, default 1); ' +
      '`speed` is the time of one jump in milliseconds (500-1500), smaller is faster.',
    [steps(1), speed()],
  );
  motion(
    'swing',
    'Sways the body from side to side by rocking on the feet, like dancing to music. ' +
      '`amount` is how far it leans, in degrees (10-50; 20 is gentle, 40 is wild). ' +
      `${PARAMS_NOTE} A good choice when the user asks the robot to dance.`,
    [steps(), speed(), amount(30, 10, 50)],
  );
  motion(
    'moonwalk',
    'Slides sideways with a moonwalk, the famous gliding dance step, without lifting the ' +
      'feet. `direction` is 1 to glide left and -1 to glide right. `amount` is the height of ' +
      `the foot wave in degrees (15-40). ${PARAMS_NOTE} Use it to show off or to entertain.`,
    [steps(), speed(), direction(), amount(25, 15, 40)],
  );
  motion(
    'bend',
    'Leans the whole body over to one side and comes back, like a bow or a stretch. ' +
      '`direction` is 1 to bend to the left and -1 to bend to the right. `steps` is the ' +
      'number of bends (default 1); `speed` is the time of one bend in milliseconds ' +
      '(500-1500), smaller is faster. Useful for greeting someone or saying thank you.',
    [steps(1), speed(), direction()],
  );
  motion(
    'shake_leg',
    'Stands on one leg and shakes the other one in the air, as if shaking off water or ' +
      'kicking a ball. `direction` is 1 to shake the left leg and -1 to shake the right leg. ' +
      '`steps` is the number of shakes (default 1); `speed` is the time of one shake in ' +
      'milliseconds (500-1500), smaller is faster.',
    [steps(1), speed(), direction()],
  );
  motion(
    'updown',
    'Bounces up and down by rising on its toes and lowering again, keeping time like a ' +
      'dancer. `amount` is how high it rises, in degrees (10-50). Good for nodding along, ' +
      `agreeing enthusiastically or waiting impatiently. ${PARAMS_NOTE}`,
    [steps(), speed(), amount(20, 10, 50)],
  );
  motion(
    'tiptoe_swing',
    'Stands on tiptoe and sways the body from side to side, a light and playful dance ' +
      'move. `amount` is the size of the sway in degrees (10-50). Works well for happy ' +
      `moods, songs and greetings. ${PARAMS_NOTE}`,
    [steps(), speed(), amount(20, 10, 50)],
  );
  motion(
    'jitter',
    'Makes the robot shiver quickly in place with small fast leg movements, as if cold, ' +
      'nervous or scared. `amount` is the size of the shiver in degrees (5-25); small ' +
      'values look like trembling, large ones like shaking. Use it to act out fear, cold or ' +
      `surprise. ${PARAMS_NOTE}`,
    [steps(), speed(500), amount(10, 5, 25)],
  );
  motion(
    'ascending_turn',
    'Rises on its toes while twisting the body, a spinning-up dance move that looks ' +
      'like the robot is being lifted. `amount` is the height of the rise in degrees ' +
      `(5-15). ${PARAMS_NOTE} Combine it with swing or updown for a longer dance.`,
    [steps(), speed(), amount(10, 5, 15)],
  );
  motion(
    'crusaito',
    'Does the crusaito, a crossing dance step that mixes a moonwalk with a sideways walk, ' +
      'moving the robot along a curved path. `direction` is 1 to travel left and -1 to ' +
      'travel right. `amount` is the size of the step in degrees (20-50). ' +
      `${PARAMS_NOTE} A lively move for party music.`,
    [steps(), speed(), direction(), amount(30, 20, 50)],
  );
  motion(
    'flapping',
    'Flaps the feet up and down like a penguin or a bird trying to fly, while moving ' +
      'slightly. `direction` is 1 to move forward while flapping and -1 to move backward. ' +
      '`amount` is the size of the flap in degrees (10-30). Funny and expressive, good for ' +
      `jokes and playful answers. ${PARAMS_NOTE}`,
    [steps(), speed(), direction(), amount(20, 10, 30)],
  );

  motion(
    'kick',
    'Balances on one leg and kicks forward with the other, like kicking a ball. ' +
      '`direction` is 1 to kick with the left foot and -1 with the right foot. `steps` is the ' +
      'number of kicks (default 1); `speed` is the time of one kick in milliseconds ' +
      '(500-1500), smaller is a harder kick. Use it for football talk or to show strength.',
    [steps(1), speed(), direction()],
  );
  motion(
    'look_around',
    'Twists the body left and right on the spot as if looking around the room, without ' +
      'walking away. `amount` is how far it twists to each side, in degrees (10-45). Good ' +
      'when the user asks the robot to search for something or to check its surroundings. ' +
      `${PARAMS_NOTE}`,
    [steps(1), speed(), amount(30, 10, 45)],
  );

  server.addTool(
    {
      name: 'self.otto.dance',
      description:
        "Performs a short dance routine made of several of the robot's moves (swing, updown, " +
        'tiptoe_swing, moonwalk, crusaito) one after another. `style` is "party" for fast, big ' +
        'moves, "calm" for slow, small ones, or "random" (default) for a mix. `steps` is the ' +
        'number of moves in the routine (1-20, default 4); `speed` is the time of one cycle in ' +
        'milliseconds (500-1500), smaller is faster. Use it when the user asks for a dance ' +
        'without naming a move; the robot stands still again afterwards.',
      properties: [
        Prop.string('style', { default: 'random' }),
        Prop.integer('steps', { default: 4, min: 1, max: 20 }),
        speed(),
      ],
    },
    (args) => {
      const style = args.string('style');
      if (style !== 'random' && style !== 'party' && style !== 'calm') {
        throw new Error(`Unknown dance style: ${style}; use random, party or calm`);
      }
      run('dance', args, ['steps', 'speed']);
      const state = ottoState(board.hardware);
      if (state.last_action !== null) state.last_action.style = style;
      return true;
    },
  );

  server.addTool(
    {
      name: 'self.otto.sit',
      description:
        'Lowers the robot into a sitting or crouching pose by turning the feet outward, and ' +
        'keeps it there. `speed` is how long the movement takes in milliseconds (500-1500). ' +
        'Use it when the user asks the robot to sit, rest or wait; it stays seated until ' +
        'self.otto.home or another motion.',
      properties: [speed()],
    },
    (args) => {
      run('sit', args, ['speed'], false);
      const state = ottoState(board.hardware);
      state.pose.left_leg = 90;
      state.pose.right_leg = 90;
      state.pose.left_foot = 150;
      state.pose.right_foot = 30;
      return true;
    },
  );

  if (initial.hands) {
    const arms = () => Prop.integer('direction', { default: 0, min: -1, max: 1 });
    const armsNote =
      '`direction` picks the arm: -1 the left arm, 1 the right arm, 0 both arms together.';
    motion(
      'hand_wave',
      `Waves hello or goodbye with an arm, lifting it and swinging it several times. ${armsNote} ` +
        '`steps` is the number of waves (1-100, default 3); `speed` is the time of one wave in ' +
        'milliseconds (500-1500), smaller is faster. Use it when someone arrives, leaves or ' +
        'says hello.',
      [steps(), speed(), arms()],
    );
    motion(
      'windmill',
      'Spins the arms in big circles like a windmill, a lively gesture for cheering or ' +
        `showing off. ${armsNote} \`steps\` is the number of turns (1-100, default 3); ` +
        '`speed` is the time of one turn in milliseconds (500-1500), smaller is faster.',
      [steps(), speed(), arms()],
    );
    server.addTool(
      {
        name: 'self.otto.hands_up',
        description:
          `Raises the arms and keeps them up, for cheering, surrendering or stretching. ${armsNote} ` +
          '`speed` is how long the movement takes in milliseconds (500-1500). The arms stay ' +
          'up until self.otto.hands_down, self.otto.home or another motion.',
        properties: [speed(), arms()],
      },
      (args) => {
        run('hands_up', args, ['speed', 'direction'], false);
        const state = ottoState(board.hardware);
        const which = args.integer('direction');
        if (which <= 0) state.pose.left_hand = 180;
        if (which >= 0) state.pose.right_hand = 0;
        return true;
      },
    );
    server.addTool(
      {
        name: 'self.otto.hands_down',
        description:
          `Lowers raised arms back to the sides. ${armsNote} \`speed\` is how long the ` +
          'movement takes in milliseconds (500-1500).',
        properties: [speed(), arms()],
      },
      (args) => {
        run('hands_down', args, ['speed', 'direction'], false);
        const state = ottoState(board.hardware);
        const which = args.integer('direction');
        if (which <= 0) state.pose.left_hand = OTTO_HOME_POSE.left_hand;
        if (which >= 0) state.pose.right_hand = OTTO_HOME_POSE.right_hand;
        return true;
      },
    );
  }

  server.addTool(
    {
      name: 'self.otto.home',
      description:
        'Returns the robot to its resting pose: standing straight with legs and feet centred ' +
        'and arms down. Use it after a pose that holds its position, or when the user asks ' +
        'the robot to stand still or stand up straight.',
    },
    () => {
      const state = ottoState(board.hardware);
      state.pose = homePose(state.hands);
      state.last_action = { name: 'home' };
      state.action_count += 1;
      return true;
    },
  );

  server.addTool(
    {
      name: 'self.otto.stop',
      description:
        'Stops whatever the robot is doing at once, drops any queued motions and returns it to ' +
        'the resting pose. Use it whenever the user says stop, enough, or calm down.',
    },
    () => {
      const state = ottoState(board.hardware);
      state.pose = homePose(state.hands);
      state.last_action = { name: 'stop' };
      board.log('I', 'OttoController', 'Stop: queue cleared, servos at home');
      return true;
    },
  );

  server.addTool(
    {
      name: 'self.otto.set_trim',
      description:
        'Calibrates one servo by storing a trim, a small angle added to every position it is ' +
        'sent, to fix a robot that leans or walks crooked. The trim is saved and kept after a ' +
        `restart. \`servo\` is one of: ${servos.join(', ')}. \`trim\` is the correction in ` +
        `degrees (${OTTO_TRIM_RANGE.min} to ${OTTO_TRIM_RANGE.max}); 0 removes it. Change ` +
        'trims only when the user is calibrating the robot; read them with self.otto.get_trims.',
      properties: [
        Prop.string('servo'),
        Prop.integer('trim', { min: OTTO_TRIM_RANGE.min, max: OTTO_TRIM_RANGE.max }),
      ],
    },
    (args) => {
      const servo = args.string('servo');
      const state = ottoState(board.hardware);
      if (!servosOf(state.hands).some((name) => name === servo)) {
        throw new Error(`Invalid servo: ${servo}; use one of ${servosOf(state.hands).join(', ')}`);
      }
      const trim = args.integer('trim');
      state.trims[servo] = trim;
      board.storage.open(OTTO_TRIMS_NAMESPACE).setInt(servo, trim);
      return true;
    },
  );

  server.addTool(
    {
      name: 'self.otto.get_trims',
      description:
        'Returns the calibration trim of every servo as JSON, in degrees, for example ' +
        '{"left_leg":0,"right_leg":-4}. Read them before adjusting a trim.',
    },
    () => ({ json: ottoState(board.hardware).trims }),
  );

  server.addTool(
    {
      name: 'self.otto.servo_sequences',
      description:
        'Plays a custom animation by moving servos directly, for poses the other tools cannot ' +
        'make. `sequence` is a JSON array of frames; each frame is an object of servo angles ' +
        `in degrees (0-180) keyed by servo name (${servos.join(', ')}) plus an optional "ms", ` +
        'the time to reach the frame (100-3000, default 500). Servos not named keep their ' +
        'angle. Example: [{"left_leg":60,"right_leg":120,"ms":400},{"left_leg":90,' +
        `"right_leg":90}]. At most ${OTTO_SEQUENCE_MAX_FRAMES} frames. \`repeat\` plays the ` +
        'whole sequence several times (1-10). The robot holds the last frame afterwards.',
      properties: [
        Prop.string('sequence'),
        Prop.integer('repeat', { default: 1, min: 1, max: 10 }),
      ],
    },
    (args) => {
      const state = ottoState(board.hardware);
      const frames = parseSequence(args.string('sequence'), servosOf(state.hands));
      const repeat = args.integer('repeat');
      for (const frame of frames) {
        for (const [servo, angle] of Object.entries(frame.angles)) state.pose[servo] = angle;
      }
      state.last_action = { name: 'servo_sequences', frames: frames.length, repeat };
      state.action_count += 1;
      return true;
    },
  );

  server.addTool(
    {
      name: 'self.otto.get_status',
      description:
        'Returns the robot state as JSON: whether it is moving, the current servo angles, ' +
        'the trims, the last motion with its arguments, and how many motions it has done. ' +
        'Use it to check what the robot is doing before giving it a new motion.',
    },
    () => {
      const state = ottoState(board.hardware);
      return {
        json: {
          moving: false,
          hands: state.hands,
          pose: state.pose,
          trims: state.trims,
          last_action: state.last_action,
          action_count: state.action_count,
        },
      };
    },
  );

  server.addTool(
    {
      name: 'self.battery.get_level',
      description:
        'Returns the battery charge as JSON: level in percent (0-100) and whether it is ' +
        'charging. Suggest charging when the level is below 20 and the user asks for long ' +
        'dances or walks.',
    },
    () => {
      const battery = board.hardware.battery;
      if (battery === undefined) throw new Error('Battery is not available');
      return { json: { level: battery.level, charging: battery.charging } };
    },
  );
}

interface SequenceFrame {
  readonly angles: Record<string, number>;
  readonly ms: number;
}

/** Parses `self.otto.servo_sequences`' frames; a bad sequence is an error reply, as in the firmware. */
function parseSequence(text: string, servos: readonly string[]): SequenceFrame[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new Error('Invalid sequence: not valid JSON');
  }
  if (!Array.isArray(parsed) || parsed.length === 0) {
    throw new Error('Invalid sequence: expected a non-empty array of frames');
  }
  if (parsed.length > OTTO_SEQUENCE_MAX_FRAMES) {
    throw new Error(`Invalid sequence: at most ${OTTO_SEQUENCE_MAX_FRAMES} frames`);
  }
  return parsed.map((frame: unknown, index): SequenceFrame => {
    if (typeof frame !== 'object' || frame === null || Array.isArray(frame)) {
      throw new Error(`Invalid sequence: frame ${index} is not an object`);
    }
    const angles: Record<string, number> = {};
    let ms = 500;
    for (const [key, value] of Object.entries(frame)) {
      if (typeof value !== 'number' || !Number.isInteger(value)) {
        throw new Error(`Invalid sequence: frame ${index}: ${key} is not an integer`);
      }
      if (key === 'ms') {
        if (value < 100 || value > 3000) {
          throw new Error(`Invalid sequence: frame ${index}: ms must be 100-3000`);
        }
        ms = value;
      } else if (servos.includes(key)) {
        if (value < 0 || value > 180) {
          throw new Error(`Invalid sequence: frame ${index}: ${key} must be 0-180`);
        }
        angles[key] = value;
      } else {
        throw new Error(`Invalid sequence: frame ${index}: unknown servo ${key}`);
      }
    }
    return { angles, ms };
  });
}
