// The shell's helpers that mongod's server-side JavaScript offers, defined in every new context.
// Shell types carry a non-enumerable `__bsonType` tag that convert.rs reads back.
(function (g) {
  function hide(o, k, v) {
    Object.defineProperty(o, k, { value: v, enumerable: false, writable: true, configurable: true });
  }
  function shellType(name, tag, init, methods) {
    var ctor = function () {
      if (!(this instanceof ctor)) {
        var o = Object.create(ctor.prototype);
        ctor.apply(o, arguments);
        return o;
      }
      hide(this, '__bsonType', tag);
      init.apply(this, arguments);
    };
    Object.defineProperty(ctor, 'name', { value: name });
    for (var m in methods) hide(ctor.prototype, m, methods[m]);
    g[name] = ctor;
    return ctor;
  }
  shellType('NumberLong', 'long', function (v) {
    hide(this, '__value', v === undefined ? '0' : String(typeof v === 'number' ? Math.trunc(v) : v));
  }, {
    valueOf: function () { return Number(this.__value); },
    toNumber: function () { return Number(this.__value); },
    toString: function () { return 'NumberLong(' + this.__value + ')'; },
    toJSON: function () { return this.__value; },
  });
  Object.defineProperty(g.NumberLong.prototype, 'floatApprox', {
    get: function () { return Number(this.__value); }, enumerable: false,
  });
  shellType('NumberInt', 'int', function (v) {
    hide(this, '__value', v === undefined ? 0 : (Number(v) | 0));
  }, {
    valueOf: function () { return this.__value; },
    toNumber: function () { return this.__value; },
    toString: function () { return 'NumberInt(' + this.__value + ')'; },
    toJSON: function () { return this.__value; },
  });
  shellType('NumberDecimal', 'decimal', function (v) {
    hide(this, '__value', v === undefined ? '0' : String(v));
  }, {
    valueOf: function () { return Number(this.__value); },
    toString: function () { return 'NumberDecimal("' + this.__value + '")'; },
    toJSON: function () { return { $numberDecimal: this.__value }; },
  });
  shellType('ObjectId', 'objectid', function (v) {
    if (v === undefined) {
      var hex = '';
      for (var i = 0; i < 24; i++) hex += Math.floor(Math.random() * 16).toString(16);
      v = (Math.floor(Date.now() / 1000)).toString(16).padStart(8, '0') + hex.slice(8);
    }
    hide(this, 'str', String(v).toLowerCase());
  }, {
    toString: function () { return 'ObjectId("' + this.str + '")'; },
    valueOf: function () { return this.str; },
    toJSON: function () { return { $oid: this.str }; },
    equals: function (other) { return other instanceof g.ObjectId && other.str === this.str; },
    getTimestamp: function () { return new Date(parseInt(this.str.slice(0, 8), 16) * 1000); },
  });
  shellType('Timestamp', 'timestamp', function (t, i) {
    this.t = t === undefined ? 0 : t;
    this.i = i === undefined ? 0 : i;
  }, {
    getTime: function () { return this.t; },
    getInc: function () { return this.i; },
    toString: function () { return 'Timestamp(' + this.t + ', ' + this.i + ')'; },
  });
  shellType('BinData', 'bindata', function (subtype, base64) {
    hide(this, '__subtype', subtype);
    hide(this, '__base64', base64);
  }, {
    base64: function () { return this.__base64; },
    subtype: function () { return this.__subtype; },
    toString: function () { return 'BinData(' + this.__subtype + ',"' + this.__base64 + '")'; },
  });
  var MinKeyType = shellType('__MinKey', 'minkey', function () {}, {
    toString: function () { return '{ "$minKey" : 1 }'; },
  });
  var MaxKeyType = shellType('__MaxKey', 'maxkey', function () {}, {
    toString: function () { return '{ "$maxKey" : 1 }'; },
  });
  g.MinKey = new MinKeyType();
  g.MaxKey = new MaxKeyType();
  g.NumberLong.prototype.constructor = g.NumberLong;

  Array.sum = function (a) {
    var s = 0;
    for (var i = 0; i < a.length; i++) s += a[i];
    return s;
  };
  Array.avg = function (a) { return a.length ? Array.sum(a) / a.length : undefined; };
  Array.contains = function (a, x) { return a.indexOf(x) >= 0; };
  Array.unique = function (a) {
    var out = [];
    for (var i = 0; i < a.length; i++) if (out.indexOf(a[i]) < 0) out.push(a[i]);
    return out;
  };
  Array.shuffle = function (a) { return a; };
  Array.tojson = function (a) { return JSON.stringify(a); };
  Array.fetchRefs = function () { throw new Error('fetchRefs is not supported'); };
  g.tojson = function (x) { return JSON.stringify(x); };
  g.isNumber = function (x) { return typeof x === 'number'; };
  g.isString = function (x) { return typeof x === 'string'; };
  g.isObject = function (x) { return typeof x === 'object' && x !== null; };
  g.ISODate = function (s) { return s === undefined ? new Date() : new Date(s); };
  g.print = function () {};
  g.printjson = function () {};
  g.sleep = function () { throw new Error('sleep is not supported in server-side JavaScript'); };

  // mapReduce's emit: collected by the engine after each map call.
  hide(g, '__emits', []);
  g.emit = function (key, value) {
    if (arguments.length !== 2) throw new Error('emit takes 2 args');
    g.__emits.push([key === undefined ? null : key, value]);
  };
})(globalThis);
